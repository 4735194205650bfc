"""Fit the performance model's efficiency constants on TensorRT-LLM's published tables; validate on other sources.

    python benchmarks/perf_calibrate.py            # fit, residuals per fitting row, validation table, summary
    python benchmarks/perf_calibrate.py --summary  # just the fit and the summaries

Fitting set: TensorRT-LLM's perf-overview at a pinned commit (benchmarks/data/published_perf.py FIT_*), total
output throughput of offline runs. Validation set (never used to fit): the same doc at an older commit (v0.17
throughput of other GPUs, models and TP; v0.14 online serving TTFT and ITL at a fixed request rate) and NVIDIA's
NIM benchmarking page (TTFT, ITL, throughput at fixed concurrency). Errors are predicted / published - 1.

The offline runs are modelled as trtllm-bench runs them: its engine settings heuristic picks maxBatchSize and
maxNumTokens from the KV cache and the dataset's lengths (tensorrt_llm/bench/build/tuning.py, calc_engine_setting
and finetune_setting, read at NVIDIA/TensorRT-LLM@04cba882084a25665e7f80f5bda71b35b9790b6f) with
kv_cache_free_gpu_mem_fraction 0.95 (the doc's setting), and every request queued at once (as many in flight
as the engine holds).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from data import published_perf as pub  # noqa: E402
from llmbackend.api.catalog import PRESETS  # noqa: E402
from llmbackend.api.v1alpha1 import EngineSpec, ModelArchitecture  # noqa: E402
from llmbackend.planning import memory, roofline  # noqa: E402
from llmbackend.planning.inventory import product_info  # noqa: E402
from llmbackend.planning.perf_model import (  # noqa: E402
    CALIBRATED,
    Efficiency,
    Hardware,
    Model,
    Prediction,
    Workload,
    attention_precision,
)

GIB = 1024**3
METRICS = ("throughput", "tpot", "ttft")
# Bounds of the search, set from what hardware allows, before any fit: a memory-bound kernel streams at most
# ~92% of the data sheet's HBM bandwidth; tensor math reaches at most its peak (fp4 has its own fraction: its
# kernels are younger and carry block scales); a layer's fixed cost in a step is between nothing and 0.5 ms; an
# all-reduce moves data at 20-100 % of the link's per-direction bandwidth.
BOUNDS = {"bandwidth": (0.3, 0.92), "compute": (0.15, 1.0), "layer_overhead_s": (0.0, 5e-4),
          "compute_fp4": (0.15, 1.0), "link_bandwidth": (0.2, 1.0)}
START = {"bandwidth": 0.7, "compute": 0.5, "layer_overhead_s": 5e-5, "compute_fp4": 0.5, "link_bandwidth": 1.0}


@dataclass(frozen=True)
class Row:
    set: str  # "fit", "validation", "outside"
    source: str
    preset: str
    gpu: str
    tp: int
    precision: str  # fp8, fp4, fp16, bf16
    isl: int
    osl: int
    concurrency: float | None = None  # None: offline, everything queued at once
    rate: float | None = None  # requests/s (open loop)
    throughput: float | None = None  # output tokens/s
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    @property
    def label(self) -> str:
        load = ("offline max" if self.concurrency is None and self.rate is None else
                f"c={self.concurrency:g}" if self.concurrency is not None else f"{self.rate:g} req/s")
        short = self.gpu.replace("NVIDIA-", "").replace("-80GB-HBM3", "").replace("-SXM4-80GB", "")
        return f"{self.preset} {short} TP{self.tp} {self.precision} {self.isl}/{self.osl} {load}"

    def published(self) -> dict[str, float]:
        return {m: v for m, v in (("throughput", self.throughput), ("tpot", self.tpot_ms), ("ttft", self.ttft_ms))
                if v is not None}


def rows() -> list[Row]:
    out: list[Row] = []
    for kind, table, lengths, source in (("fit", pub.FIT_THROUGHPUT, pub.FIT_LENGTHS, pub.FIT_SOURCE),
                                         ("outside", pub.FIT_OUTSIDE_MODEL, pub.FIT_LENGTHS, pub.FIT_SOURCE),
                                         ("validation", pub.OLD_THROUGHPUT, pub.OLD_LENGTHS, pub.OLD_SOURCE)):
        for preset, gpu, tp, precision, values in table:
            for (isl, osl), value in zip(lengths, values, strict=True):
                if value is not None:
                    out.append(Row(kind, source, preset, gpu, tp, precision, isl, osl, throughput=float(value)))
    for preset, gpu, tp, isl, osl, qps, _achieved, ttft, itl in pub.ONLINE:
        out.append(Row("validation", pub.OLD_SOURCE + " (online serving, v0.14)", preset, gpu, tp, "bf16", isl, osl,
                       rate=float(qps), ttft_ms=float(ttft), tpot_ms=float(itl)))
    for isl, osl, conc, ttft, itl, tput in pub.NIM_70B_H100_TP2_FP8:
        out.append(Row("validation", pub.NIM_SOURCE, "llama-3.3-70b", "NVIDIA-H100-80GB-HBM3", 2, "fp8", isl, osl,
                       concurrency=float(conc), throughput=tput, ttft_ms=ttft, tpot_ms=itl))
    return out


# ---- the engine a row ran ----

_QUANT = {"fp8": ("fp8", "fp8"), "fp4": ("int4_awq", "fp8"), "fp16": ("fp16", "fp16"), "bf16": ("bf16", "bf16")}
_BENCH_BYTES = {"fp8": 1.0, "fp4": 0.5, "fp16": 2.0, "bf16": 2.0}


def trtllm_bench_settings(arch: ModelArchitecture, precision: str, tp: int, pp: int, isl: int, osl: int,
                          gpu_memory_gib: float) -> tuple[int, int]:
    """(max batch size, max num tokens) as trtllm-bench's calc_engine_setting + finetune_setting choose them."""
    kv_bytes = 1.0 if precision in ("fp8", "fp4") else 2.0
    per_token_gib = 2 * arch.num_layers * max(tp, arch.num_key_value_heads) * arch.head_dim * kv_bytes / GIB
    engine_gib = arch.parameter_count * _BENCH_BYTES[precision] / GIB
    cache_gib = (gpu_memory_gib * tp * pp - engine_gib) * 0.95
    requests = cache_gib / (per_token_gib * (isl + osl))
    raw_bs = min(requests, 4096) / pp
    raw_token = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        max_bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        max_bs = 128 * math.ceil(raw_bs / 128)
    else:
        max_bs = 256 * math.ceil(raw_bs / 256)
    if raw_token < 4096:
        max_token = max(2048, 256 * math.ceil(raw_token / 256))
    elif raw_token < 8192:
        max_token = 512 * math.ceil(raw_token / 512)
    else:
        max_token = 1024 * math.ceil(raw_token / 1024)
    return max_bs, max_token


def model_for(row: Row, eff: Efficiency) -> tuple[Model, float]:
    arch = PRESETS[row.preset]
    product = product_info(row.gpu)
    quant, kv = _QUANT[row.precision]
    pp = 1
    if row.concurrency is None and row.rate is None:  # offline trtllm-bench run
        max_bs, max_tokens = trtllm_bench_settings(arch, row.precision, row.tp, pp, row.isl, row.osl,
                                                   product.memory_mib / 1024)
        fraction = 0.95
    else:  # a served engine: limits not published; TensorRT-LLM's default maxNumTokens
        max_bs, max_tokens, fraction = 2048, 8192, 0.9
    engine = EngineSpec(quantization=quant, kv_cache_dtype=kv, max_batch_size=min(max_bs, 4096),
                        max_num_tokens=max_tokens, max_input_len=row.isl, max_seq_len=row.isl + row.osl,
                        kv_cache_free_gpu_mem_fraction=fraction)
    mem = memory.estimate(arch, engine, row.tp, pp)
    kv_capacity = memory.fit(mem, product.memory_mib * 1024 * 1024, engine, product.reserve_fraction).kv_capacity
    link = roofline.tp_link(product, roofline.LINK_NVLINK)
    precision = "fp4" if row.precision == "fp4" else ("fp8" if row.precision == "fp8" else "16bit")
    hw = Hardware(product.hbm_gbps, product.tflops(precision), link if row.tp > 1 else None, None,
                  product.tflops(attention_precision(precision)), precision)
    return Model(arch, engine, hw, row.tp, pp, eff), kv_capacity


def predict(row: Row, eff: Efficiency) -> Prediction:
    model, kv_capacity = model_for(row, eff)
    if row.rate is not None:
        return model.at_rate(row.isl, row.osl, row.rate, kv_capacity)
    conc = None if row.concurrency is None else int(row.concurrency)
    return model.predict(Workload(row.isl, row.osl, conc), kv_capacity)


def errors(row: Row, pred: Prediction) -> dict[str, float]:
    got = {"throughput": pred.output_tokens_per_s, "tpot": pred.tpot_ms, "ttft": pred.ttft_ms}
    return {m: got[m] / v - 1 for m, v in row.published().items()}


# ---- fit ----

def loss(eff: Efficiency, fit_rows: list[Row]) -> float:
    return statistics.fmean(math.log(predict(r, eff).output_tokens_per_s / (r.throughput or 1)) ** 2
                            for r in fit_rows)


def fit(fit_rows: list[Row], rounds: int = 10) -> Efficiency:
    """Coordinate descent, golden-section search on each constant in turn (squared log error of throughput)."""
    current = dict(START)
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(rounds):
        for name, (lo, hi) in BOUNDS.items():
            def f(x: float, name: str = name) -> float:
                return loss(Efficiency(**{**current, name: x}), fit_rows)
            a, b = lo, hi
            c, d = b - golden * (b - a), a + golden * (b - a)
            fc, fd = f(c), f(d)
            for _ in range(18):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - golden * (b - a)
                    fc = f(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + golden * (b - a)
                    fd = f(d)
            current[name] = (a + b) / 2
    return Efficiency(**current)


def rounded(eff: Efficiency) -> Efficiency:
    return Efficiency(round(eff.bandwidth, 2), round(eff.compute, 2), round(eff.layer_overhead_s, 6),
                      round(eff.compute_fp4, 2), round(eff.link_bandwidth, 2))


# ---- report ----

def describe(eff: Efficiency) -> str:
    return (f"bandwidth {eff.bandwidth:.2f} of peak HBM, compute {eff.compute:.2f} of peak dense TFLOPS, "
            f"fp4 compute {eff.compute_fp4:.2f}, {eff.layer_overhead_s * 1e6:.0f} us a layer a step, "
            f"all-reduces at {eff.link_bandwidth:.2f} of the link's bandwidth")


def summary(errs: dict[str, list[float]]) -> dict[str, tuple[int, float, float]]:
    """metric -> (rows, median |error|, share within +-30 %)."""
    out = {}
    for m in METRICS:
        e = errs.get(m, [])
        if e:
            out[m] = (len(e), statistics.median(abs(x) for x in e), sum(abs(x) <= 0.30 for x in e) / len(e))
    return out


def evaluate(kind: str, eff: Efficiency) -> tuple[list[tuple[Row, Prediction, dict[str, float]]], dict]:
    results = []
    errs: dict[str, list[float]] = {}
    for row in (r for r in rows() if r.set == kind):
        pred = predict(row, eff)
        e = errors(row, pred)
        results.append((row, pred, e))
        for m, v in e.items():
            errs.setdefault(m, []).append(v)
    return results, summary(errs)


def _fmt(row: Row, pred: Prediction, e: dict[str, float]) -> str:
    parts = []
    for m, unit, got in (("throughput", "tok/s", pred.output_tokens_per_s), ("tpot", "ms/tok", pred.tpot_ms),
                         ("ttft", "ms TTFT", pred.ttft_ms)):
        if m in e:
            pub_v = row.published()[m]
            parts.append(f"{m} {got:,.1f} vs {pub_v:,.1f} {unit} ({e[m]:+.0%})")
    return f"  {row.label:<58} " + "; ".join(parts)


def _print_summary(title: str, s: dict) -> None:
    print(title)
    for m, (n, med, within) in s.items():
        print(f"  {m:<10} rows {n:>3}  median |error| {med:5.1%}  within +-30 %: {within:5.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", action="store_true", help="only the fit and the summaries")
    args = parser.parse_args(argv)
    fit_rows = [r for r in rows() if r.set == "fit"]
    eff = rounded(fit(fit_rows))
    print(f"Fit on {len(fit_rows)} rows of {pub.FIT_SOURCE}:")
    print(f"  {describe(eff)}\n  (committed in perf_model.CALIBRATED: {describe(CALIBRATED)});\n"
          f"  mean squared log error {loss(eff, fit_rows):.4f}")
    for kind, title in (("fit", "Fitting set (residuals)"), ("validation", "Validation set (never fitted)"),
                        ("outside", "Outside the model (MoE with attention data parallelism; not fitted, not validated)")):
        results, s = evaluate(kind, CALIBRATED)
        if not args.summary:
            print(f"\n{title}:")
            for row, pred, e in results:
                print(_fmt(row, pred, e))
        print()
        _print_summary(f"{title}, summary with the committed constants:", s)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
