"""Planning: from GPU nodes and a model to the TP x PP shape of one replica.

Pure code, no Kubernetes API calls (except the two CLI entry points):

- `inventory`: Node dicts -> `GPUNode` (GFD or managed-cloud labels, allocatable
  GPUs, NVLink domains from the `llmbackend.dev/gpu-topology` annotation or
  inferred from the product), `PRODUCTS` (the one table of GPU facts),
  `Inventory` index, `node_matches`, `gpu_fingerprint`.
- `memory`: per-GPU memory estimate (weights, KV cache, activations, overhead)
  and `fit()` (reserve, kvCacheFreeGpuMemFraction, vLLM's total fraction).
- `perf_model`: time to first token, time per output token and throughput of a
  plan for a workload (calibrated: benchmarks/perf_calibrate.py).
- `roofline`: the links a placement uses, the default workload, `estimate()`.
- `planner`: `plan()` -> `Plan` (cost model in its docstring), `replicas_capacity()`.
- `podfit`: could the kube-scheduler place a rendered pod on a node of a GPU pool
  (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit); `quantity`:
  resource quantities in the scheduler's units.
- `cli`: `llmbackend plan -f backend.yaml --nodes nodes.yaml -o json|text`.
- `topology_reporter`: `llmbackend topology-reporter`, annotates a Node with its
  NVLink domains read from NVML or `nvidia-smi topo -m`.
"""
