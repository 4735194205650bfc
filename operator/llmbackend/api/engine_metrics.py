"""Names of the engine-level metrics the serving models export on Triton's :8002 (the one place they are defined).

Triton's own `nv_inference_queue_duration_us` / `nv_inference_compute_infer_duration_us` read ~0 for decoupled
LLM models: the Python model hands each request to the engine and returns at once, and the engine's wait happens
inside it. So the operator's serving models (TensorRT-LLM LLM API and vLLM) export the engine's own timing:

- per finished request, queue time = first scheduled - arrival, compute time = last token - first scheduled
  (TensorRT-LLM: RequestOutput...request_perf_metrics.timing_metrics; vLLM: its per-request queued/inference time),
  accumulated as counters in microseconds, plus a counter of finished requests (cumulative, like Triton's);
- per finished request, its whole time in the engine (arrival to last token = queue + compute), in seconds, as a
  cumulative Prometheus histogram with the fixed buckets below: the engine counters alone give only the mean, and the
  operator compares the observed p99 with the drain bound (autoscaling/drain.py);
- gauges from the engine's iteration stats, under the names the Gateway API Inference Extension and NVIDIA's
  dashboards read for TensorRT-LLM (and, for vLLM backends, vLLM's own names as well).

The model files shipped in the ConfigMap run inside the serving image and cannot import this package: the renderer
passes these names to them through config.pbtxt parameters, and a test checks the exported names equal these.
"""

from __future__ import annotations

# Counters (cumulative, microseconds / requests), labels: model, version.
ENGINE_QUEUE_METRIC = "llmbackend_engine_queue_duration_us"
ENGINE_COMPUTE_METRIC = "llmbackend_engine_compute_duration_us"
ENGINE_REQUESTS_METRIC = "llmbackend_engine_requests_finished"
ENGINE_FAILURES_METRIC = "llmbackend_engine_requests_failed"
# Requests answered with a client error (invalid input, a prompt that cannot fit: 400-class), counted apart from the
# failures above (the server's or the engine's fault: 500-class), so that bad input does not look like a sick engine.
ENGINE_REJECTED_METRIC = "llmbackend_engine_requests_rejected"

# Histogram (Triton's HISTOGRAM family: <name>_bucket{le=...}, <name>_sum, <name>_count), labels: model, version.
# Each finished request's time in the engine, arrival to last token, seconds (the same requests and the same timing
# as the queue + compute counters). Bucket upper bounds, roughly geometric from a short completion to the longest
# drain bound (render/drain.py MAX_DRAIN_S), finer where drain bounds usually lie (1-15 min); +Inf is implicit.
ENGINE_REQUEST_SECONDS_METRIC = "llmbackend_engine_request_duration_seconds"
ENGINE_REQUEST_SECONDS_BUCKETS: tuple[float, ...] = (
    0.5, 1, 2, 4, 8, 15, 30, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1200, 1800)

# Gauges, TensorRT-LLM names (also exported by the vLLM model, so one source path reads both).
REQUEST_GAUGE = "nv_trt_llm_request_metrics"        # label request_type
REQUEST_TYPES = ("waiting", "scheduled", "active", "max")
KV_GAUGE = "nv_trt_llm_kv_cache_block_metrics"      # label kv_cache_block_type
KV_TYPES = ("used", "free", "max", "fraction")

# vLLM names read by the Gateway API Inference Extension's endpoint picker (vLLM backends only).
VLLM_WAITING_GAUGE = "vllm:num_requests_waiting"
VLLM_RUNNING_GAUGE = "vllm:num_requests_running"
VLLM_KV_USAGE_GAUGE = "vllm:kv_cache_usage_perc"

# With spec.adapters: the Model Server Protocol's LoRA gauge (vLLM's vllm:lora_requests_info labels), exported by both
# models under one name; the endpoint picker's lora-affinity-scorer reads it (render/gateway.py).
LORA_INFO_GAUGE = "llmbackend_lora_requests_info"

# Triton's own counters: meaningful only for non-decoupled, non-LLM models.
TRITON_QUEUE_METRIC = "nv_inference_queue_duration_us"
TRITON_COMPUTE_METRIC = "nv_inference_compute_infer_duration_us"
TRITON_SUCCESS_METRIC = "nv_inference_request_success"
TRITON_PENDING_METRIC = "nv_inference_pending_request_count"

# The activator (serving/activator.py) of a backend that scales to zero: requests it holds while no replica exists.
# The operator reads it to scale 0 -> 1 (autoscaling/activation.py); the renderer passes the name to the program.
ACTIVATOR_HELD_METRIC = "llmbackend_activator_requests_held"

# Series derived from the counters above (render/hpa.py writes the rules that produce them; the Prometheus source,
# KEDA's trigger and the HPA read them). The recording rule follows Prometheus' level:metric:operations convention;
# the adapter renames it without colons for the custom metrics API (see render/hpa.py).
RECORDING_RULE_NAME = "llmbackend:engine_queue_compute:ratio"
HPA_METRIC_NAME = "llmbackend_engine_queue_compute_ratio"

# Every series of the serving pods that the operator, its dashboard (manifests/grafana) or its alert rules
# (manifests/monitoring) read: name -> (Prometheus type, labels, meaning). docs/monitoring.md is generated from it.
SERVED_SERIES: dict[str, tuple[str, tuple[str, ...], str]] = {
    ENGINE_QUEUE_METRIC: ("counter", ("model", "version"),
                          "Microseconds finished requests waited in the engine's queue (first scheduled - arrival)."),
    ENGINE_COMPUTE_METRIC: ("counter", ("model", "version"),
                            "Microseconds finished requests were computed (last token - first scheduled)."),
    ENGINE_REQUESTS_METRIC: ("counter", ("model", "version"), "Requests the engine finished."),
    ENGINE_FAILURES_METRIC: ("counter", ("model", "version"), "Requests that failed in the engine."),
    ENGINE_REQUEST_SECONDS_METRIC: ("histogram", ("model", "version"),
                                    "Seconds from arrival to last token of each finished request (buckets "
                                    + ", ".join(f"{b:g}" for b in ENGINE_REQUEST_SECONDS_BUCKETS) + ")."),
    REQUEST_GAUGE: ("gauge", ("model", "version", "request_type"),
                    "Requests in the engine by request_type: " + ", ".join(REQUEST_TYPES)
                    + " (max: batch slots, maxBatchSize)."),
    KV_GAUGE: ("gauge", ("model", "version", "kv_cache_block_type"),
               "KV-cache blocks by kv_cache_block_type: " + ", ".join(KV_TYPES) + " (fraction: used / max)."),
    VLLM_WAITING_GAUGE: ("gauge", ("model", "version"), "vLLM backends: requests waiting (the Inference Extension reads it)."),
    LORA_INFO_GAUGE: ("gauge", ("model", "version", "running_lora_adapters", "waiting_lora_adapters", "max_lora"),
                      "With spec.adapters: the adapters requests in the engine name (running_lora_adapters, "
                      "comma-separated; waiting_lora_adapters stays empty) and maxLoras; the value is when that set "
                      "was current (the Inference Extension's LoRA-affinity scorer reads the latest)."),
    VLLM_RUNNING_GAUGE: ("gauge", ("model", "version"), "vLLM backends: requests running."),
    VLLM_KV_USAGE_GAUGE: ("gauge", ("model", "version"), "vLLM backends: KV-cache usage, 0-1."),
    TRITON_QUEUE_METRIC: ("counter", ("model", "version"), "Triton's own queue time (~0 for decoupled LLM models)."),
    TRITON_COMPUTE_METRIC: ("counter", ("model", "version"), "Triton's own compute time (~0 for decoupled LLM models)."),
    TRITON_SUCCESS_METRIC: ("counter", ("model", "version"), "Triton's successful inference requests."),
    TRITON_PENDING_METRIC: ("gauge", ("model", "version"), "Triton's pending requests."),
}
