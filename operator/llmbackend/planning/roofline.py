"""The planner's estimate for one candidate plan: links, the default workload, and perf_model's prediction.

The physics and the calibrated efficiency constants are in perf_model.py; this
module chooses the links a placement uses and the workload a plan is estimated
for. Without one given (`llmbackend plan --isl/--osl/--concurrency`) the
workload is the spec's limits: maxInputLen input tokens, maxSeqLen -
maxInputLen output tokens, as many requests in flight as maxBatchSize and the
KV cache allow.

Link figures: NVLink per direction = the product's quoted NVLink bandwidth / 2;
PCIe x16 per direction by generation; across nodes 50 GB/s (400 Gb/s NICs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.v1alpha1 import EngineSpec, ModelArchitecture
from .inventory import GPUProduct
from .memory import kv_dtype_name
from .perf_model import CALIBRATED, Hardware, Link, Model, Prediction, Workload, attention_precision, math_precision

NVLINK_LATENCY_S = 5e-6  # one small all-reduce over NVSwitch / NVLink
CLIQUE_LATENCY_S = 8e-6  # over a multi-node NVLink clique
PCIE_LATENCY_S = 20e-6  # one small all-reduce through the PCIe switch / host
NETWORK_GBPS = 50  # pipeline hop between nodes (400 Gb/s)
NETWORK_LATENCY_S = 30e-6

LINK_NVLINK, LINK_CLIQUE, LINK_PCIE, LINK_NETWORK = "nvlink", "clique", "pcie", "network"

__all__ = ["Estimate", "Link", "Workload", "default_workload", "estimate", "network_link", "tp_link"]


def tp_link(product: GPUProduct, kind: str) -> Link:
    if kind in (LINK_NVLINK, LINK_CLIQUE) and product.nvlink_gbps:
        lat = NVLINK_LATENCY_S if kind == LINK_NVLINK else CLIQUE_LATENCY_S
        where = "" if kind == LINK_NVLINK else " (multi-node clique)"
        return Link(kind, product.nvlink_gbps / 2, lat, product.link_text(True) + where)
    return Link(LINK_PCIE, product.pcie_gbps, PCIE_LATENCY_S, product.link_text(False))


def network_link() -> Link:
    return Link(LINK_NETWORK, NETWORK_GBPS, NETWORK_LATENCY_S, f"network {NETWORK_GBPS} GB/s")


def default_workload(engine: EngineSpec) -> Workload:
    """Full-length requests at the spec's limits, as many in flight as fit."""
    return Workload(engine.max_input_len, max(engine.max_seq_len - engine.max_input_len, 1), None)


_PRECISION_TEXT = {"16bit": "16-bit", "fp8": "fp8", "fp4": "fp4"}


@dataclass(frozen=True, slots=True)
class Estimate:
    """Predicted figures of one plan for one workload (perf_model.Prediction), with the figures they used."""

    time_per_output_token_ms: float
    tokens_per_second: float  # output tokens/s per replica at the workload
    concurrency: int  # requests in flight in the engine
    allreduce_ms: float  # of one engine step
    hbm_gbps: int
    tp_link: str
    stage_link: str  # "" without pipeline stages
    time_to_first_token_ms: float
    workload: Workload
    tflops: float
    precision: str
    bound: str
    latency_ms: float  # one request's TTFT + (O - 1) x TPOT: what the latency objective compares
    exchange: str = "all-reduce"  # what crosses the TP link each step (attention DP: tokens to the experts)

    def describe(self, gpus: int) -> str:
        text = (f"~{self.time_to_first_token_ms:,.0f} ms to first token, ~{self.time_per_output_token_ms:.1f} ms per "
                f"output token, ~{self.tokens_per_second:,.0f} output tokens/s per replica "
                f"({self.tokens_per_second / gpus:,.0f} per GPU) for {self.workload.input_tokens} input / "
                f"{self.workload.output_tokens} output tokens at {self.concurrency} request(s) in flight "
                f"({self.bound}-bound); HBM {self.hbm_gbps / 1000:g} TB/s and "
                f"{self.tflops:,.0f} TFLOPS {_PRECISION_TEXT.get(self.precision, self.precision)} per GPU")
        if gpus > 1:
            text += f", TP over {self.tp_link} ({self.allreduce_ms:.2f} ms of {self.exchange} a step)"
        if self.stage_link:
            text += f", stages over {self.stage_link}"
        return text


def estimate(arch: ModelArchitecture, engine: EngineSpec, product: GPUProduct, tp: int, pp: int,
             link: Link, stage_link: Link | None, kv_capacity_bytes: int, workload: Workload | None = None,
             attention_dp: bool = False) -> Estimate:
    workload = workload or default_workload(engine)
    precision = math_precision(engine.quantization, fp4_tensor_cores=product.tflops_fp4 > 0)
    # Attention computes in the KV cache's precision: fp8 at most, 16-bit over a 16-bit KV cache.
    attention = attention_precision(precision) if kv_dtype_name(engine) == "fp8" else "16bit"
    hw = Hardware(product.hbm_gbps, product.tflops(precision), link if tp > 1 else None,
                  stage_link if pp > 1 else None, product.tflops(attention), precision)
    model = Model(arch, engine, hw, tp, pp, CALIBRATED, attention_dp)
    pred: Prediction = model.predict(workload, kv_capacity_bytes)
    # The latency objective: one request's time at the workload's concurrency (one request when none is given).
    single = pred if workload.concurrency is not None else model.predict(
        Workload(workload.input_tokens, workload.output_tokens, 1), kv_capacity_bytes)
    latency = single.ttft_ms + (workload.output_tokens - 1) * single.tpot_ms
    return Estimate(
        time_per_output_token_ms=pred.tpot_ms, tokens_per_second=pred.output_tokens_per_s,
        concurrency=int(pred.in_flight), allreduce_ms=pred.allreduce_ms, hbm_gbps=product.hbm_gbps,
        tp_link=link.text, stage_link=stage_link.text if (pp > 1 and stage_link is not None) else "",
        time_to_first_token_ms=pred.ttft_ms, workload=workload, tflops=hw.tflops, precision=precision,
        bound=pred.bound, latency_ms=latency,
        exchange="token all-to-all (dispatch and combine)" if attention_dp and tp > 1 else "all-reduce",
    )
