"""A vLLM backend whose spec contradicts its checkpoint's own quantization: a Degraded condition, not a crash loop."""

from __future__ import annotations

from conftest import apply_manifest, condition, wait_for

ARCH = {"numLayers": 32, "hiddenSize": 4096, "numAttentionHeads": 32, "numKeyValueHeads": 8, "headDim": 128,
        "vocabSize": 128256, "parameterCount": 8_030_000_000}


def test_quantization_contradicting_the_checkpoint_is_a_condition(cluster, operator, namespace):
    spec = {"model": {"architecture": dict(ARCH, checkpointQuantization="awq"), "source": {"uri": "s3://m/awq"}},
            "engine": {"backend": "vllm", "quantization": "fp8"}}
    manifest = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend",
                "metadata": {"name": "mismatch", "namespace": namespace}, "spec": spec}
    apply_manifest(cluster, manifest)
    obj = wait_for(lambda: (o := cluster.kube.get("LLMBackend", namespace, "mismatch"))
                   and (condition(o, "Degraded") or {}).get("status") == "True" and o,
                   timeout=30, what="Degraded condition")
    degraded = condition(obj, "Degraded")
    assert degraded["reason"] == "QuantizationMismatch"
    assert "awq" in degraded["message"] and "engine.quantization" in degraded["message"]
    assert cluster.kube.get("Deployment", namespace, "mismatch") is None
    assert operator.proc.poll() is None, operator.log_tail()

    # Fixing the spec (the checkpoint's own 4-bit weights) renders the backend.
    apply_manifest(cluster, {**manifest, "spec": {**spec, "engine": {"backend": "vllm", "quantization": "int4_awq"}}})
    wait_for(lambda: cluster.kube.get("Deployment", namespace, "mismatch"), timeout=30, what="Deployment")
    config = wait_for(lambda: next((c for c in cluster.kube.list("ConfigMap", namespace)
                                    if c["metadata"]["name"].startswith("mismatch")), None),
                      timeout=30, what="ConfigMap")
    model_json = next(v for k, v in config["data"].items() if k.endswith("model.json"))
    assert '"quantization"' not in model_json  # vLLM reads AWQ from the checkpoint
