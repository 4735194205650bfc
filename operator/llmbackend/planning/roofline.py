"""Roofline estimate of decode speed for one plan: time per output token and throughput.

Decode is memory-bandwidth bound. One step of a pipeline stage reads its
weights and the KV cache of the batch from HBM, and all-reduces the hidden
state twice per layer over the TP link:

    stage step = (weights read + batch x KV per sequence) / HBM bandwidth
                 + 2 x stage layers x (link latency + 2 (tp-1)/tp x batch x hidden x 2 B / link bandwidth)

all per GPU (weights and KV are already the 1/tp share). MoE reads only the
experts the batch touches: E x (1 - (1 - k/E)^batch) of E routed experts
(batch 1: the active parameters). A token crosses the pp stages in turn
(plus one hop per stage boundary). Time per output token is for one request
at half of maxSeqLen of context; throughput is for the achievable concurrency
split into pp micro-batches. These are upper bounds on speed (peak bandwidth,
no kernel overheads): they rank plans, they do not promise numbers.

Link figures: NVLink per direction = the product's quoted NVLink bandwidth / 2;
PCIe x16 per direction by generation; across nodes 50 GB/s (400 Gb/s NICs).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..api.v1alpha1 import EngineSpec, ModelArchitecture
from .inventory import GPUProduct
from .memory import kv_bytes_per_sequence, stage_layers, weight_bytes_per_gpu

NVLINK_LATENCY_S = 5e-6  # one small all-reduce over NVSwitch / NVLink
CLIQUE_LATENCY_S = 8e-6  # over a multi-node NVLink clique
PCIE_LATENCY_S = 20e-6  # one small all-reduce through the PCIe switch / host
NETWORK_GBPS = 50  # pipeline hop between nodes (400 Gb/s)
NETWORK_LATENCY_S = 30e-6

LINK_NVLINK, LINK_CLIQUE, LINK_PCIE, LINK_NETWORK = "nvlink", "clique", "pcie", "network"


@dataclass(frozen=True, slots=True)
class Link:
    kind: str
    gbps: float  # per direction
    latency_s: float
    text: str


def tp_link(product: GPUProduct, kind: str) -> Link:
    if kind in (LINK_NVLINK, LINK_CLIQUE) and product.nvlink_gbps:
        lat = NVLINK_LATENCY_S if kind == LINK_NVLINK else CLIQUE_LATENCY_S
        where = "" if kind == LINK_NVLINK else " (multi-node clique)"
        return Link(kind, product.nvlink_gbps / 2, lat, product.link_text(True) + where)
    return Link(LINK_PCIE, product.pcie_gbps, PCIE_LATENCY_S, product.link_text(False))


def network_link() -> Link:
    return Link(LINK_NETWORK, NETWORK_GBPS, NETWORK_LATENCY_S, f"network {NETWORK_GBPS} GB/s")


@dataclass(frozen=True, slots=True)
class Estimate:
    time_per_output_token_ms: float  # one request
    tokens_per_second: float  # per replica at `concurrency`
    concurrency: int
    allreduce_ms: float  # of time per output token
    hbm_gbps: int
    tp_link: str
    stage_link: str  # "" without pipeline stages

    def describe(self, gpus: int) -> str:
        text = (f"~{self.time_per_output_token_ms:.2f} ms per output token at batch 1 "
                f"({self.allreduce_ms:.2f} ms of it all-reduce), ~{self.tokens_per_second:,.0f} tokens/s per replica "
                f"at {self.concurrency} sequences ({self.tokens_per_second / gpus:,.0f} per GPU); "
                f"HBM {self.hbm_gbps / 1000:g} TB/s per GPU")
        if gpus > 1:
            text += f", TP over {self.tp_link}"
        if self.stage_link:
            text += f", stages over {self.stage_link}"
        return text


def _read_fraction(arch: ModelArchitecture, batch: float) -> float:
    """Fraction of the weights one decode step reads (MoE: shared part + touched experts)."""
    experts, k = arch.num_experts, arch.num_experts_per_token
    active = arch.active_parameter_count
    if not experts or not k or not active or active >= arch.parameter_count or k >= experts:
        return 1.0
    total = arch.parameter_count
    routed = experts * (total - active) / (experts - k)  # all routed experts
    dense = max(total - routed, 0.0)
    touched = experts * (1 - (1 - k / experts) ** max(batch, 1.0))
    return min(1.0, (dense + routed * touched / experts) / total)


def _stage_seconds(arch: ModelArchitecture, engine: EngineSpec, product: GPUProduct, tp: int, pp: int,
                   link: Link, batch: float, context: int) -> tuple[float, float]:
    """(stage step seconds, all-reduce part) for `batch` sequences of `context` tokens."""
    weights = weight_bytes_per_gpu(arch, engine.quantization, tp, pp) * _read_fraction(arch, batch)
    kv = batch * kv_bytes_per_sequence(arch, engine, tp, pp, context)
    memory_s = (weights + kv) / (product.hbm_gbps * 1e9)
    comm_s = 0.0
    if tp > 1:
        message = batch * arch.hidden_size * 2
        per_allreduce = link.latency_s + 2 * (tp - 1) / tp * message / (link.gbps * 1e9)
        comm_s = 2 * stage_layers(arch.num_layers, pp) * per_allreduce
    return memory_s + comm_s, comm_s


def estimate(arch: ModelArchitecture, engine: EngineSpec, product: GPUProduct, tp: int, pp: int,
             link: Link, stage_link: Link | None, concurrency: int) -> Estimate:
    context = max(1, engine.max_seq_len // 2)
    hop_s = 0.0
    if pp > 1 and stage_link is not None:
        hop_s = stage_link.latency_s + arch.hidden_size * 2 / (stage_link.gbps * 1e9)
    one, comm_one = _stage_seconds(arch, engine, product, tp, pp, link, 1, context)
    tpot = pp * one + (pp - 1) * hop_s
    micro = max(concurrency / pp, 1.0)
    step, _ = _stage_seconds(arch, engine, product, tp, pp, link, micro, context)
    tokens_per_s = micro / (step + (hop_s if pp > 1 else 0.0))
    return Estimate(
        time_per_output_token_ms=tpot * 1e3, tokens_per_second=tokens_per_s, concurrency=concurrency,
        allreduce_ms=pp * comm_one * 1e3, hbm_gbps=product.hbm_gbps, tp_link=link.text,
        stage_link=stage_link.text if (pp > 1 and stage_link is not None) else "",
    )
