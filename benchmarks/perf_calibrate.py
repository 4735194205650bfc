"""Fit the performance model's efficiency constants on TensorRT-LLM's published tables; validate on other sources.

    python benchmarks/perf_calibrate.py            # fit, residuals per fitting row, validation table, summary
    python benchmarks/perf_calibrate.py --summary  # just the fit and the summaries
    python benchmarks/perf_calibrate.py --corner   # the H200 products' roofline corner (below), then stop

Measured on an H200 (benchmarks/data/h200/, written by benchmarks/gemm_roofline.py and
benchmarks/layer_kernels.py on a GPU lent to this project): the weights' bandwidth fraction is the best any
Llama-shaped product reached there, the compute fraction's upper bound likewise; the fixed cost of a layer in a
step is what a decoder layer replayed from a CUDA graph at 1-64 tokens took beyond the model's time for its weights
and KV cache at that bandwidth (stock PyTorch kernels). Both are held out of the fit, which sets the rest on the
throughput tables; the low-load validation rows are never fitted.
"""

from __future__ import annotations

import argparse
import functools
import json
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
MEASURED = Path(__file__).resolve().parent / "data" / "h200"
MEASURED_PRODUCT = "NVIDIA-H200"
MEMORY_BOUND_ROWS = 128   # products of at most this many rows stream their weights (measured: flat up to 128)
COMPUTE_BOUND_ROWS = 1024  # products of at least this many rows are limited by tensor math


def load_measured(name: str) -> list[dict]:
    return json.loads((MEASURED / name).read_text())["points"]


def product_bytes(p: dict) -> float:
    """Bytes a measured product moves: its weights and input (1 byte a value in fp8, 2 in bf16), its bf16 output."""
    width = 1 if p["dtype"] == "fp8" else 2
    return (p["rows_run"] * p["k"] + p["k"] * p["n"]) * width + p["rows_run"] * p["n"] * 2


def measured_peaks() -> tuple[float, float]:
    """(bandwidth, compute): the best fractions of the H200's data-sheet HBM bandwidth and dense tensor peak that
    any measured product reached (memory-bound: at most MEMORY_BOUND_ROWS rows; compute-bound: at least
    COMPUTE_BOUND_ROWS), over both runs."""
    product = product_info(MEASURED_PRODUCT)
    bw, compute = 0.0, 0.0
    for name in ("gemm_run1.json", "gemm_run2.json"):
        for p in load_measured(name):
            if p["rows_run"] <= MEMORY_BOUND_ROWS:
                bw = max(bw, product_bytes(p) / p["seconds"] / (product.hbm_gbps * 1e9))
            if p["rows_run"] >= COMPUTE_BOUND_ROWS:
                peak = product.tflops("fp8" if p["dtype"] == "fp8" else "16bit") * 1e12
                compute = max(compute, 2 * p["rows_run"] * p["k"] * p["n"] / p["seconds"] / peak)
    return bw, compute


def measured_layers() -> list[tuple[float, float]]:
    """(seconds, weight bytes) of one bf16 decoder layer at one token, replayed from a graph, per measured shape,
    and the weights it streamed."""
    gemms: dict[str, float] = {}
    for p in load_measured("gemm_run1.json"):
        if p["dtype"] == "bf16" and p["tokens"] == 1:
            gemms[p["model"]] = gemms.get(p["model"], 0.0) + 2 * p["k"] * p["n"]
    return [(p["layer_graph"], gemms[p["model"]])
            for p in load_measured("layer_kernels.json") if p["tokens"] == 1]


CORNERS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0, 50.0)


@functools.cache
def corner_errors() -> dict[str, dict[float, tuple[float, float, float, float]]]:
    """How sharp the roofline's corner is on the H200: each measured product's time fitted as
    t0 + (bytes / (b x HBM)^p + FLOPs / (c x peak)^p)^(1/p), t0 a fixed cost a product, per precision; for each
    corner exponent p, the best (mean squared log error, b, c, t0) on a grid (p = 1: memory and compute time add;
    large p: a sharp max())."""
    import numpy as np

    product = product_info(MEASURED_PRODUCT)
    points = load_measured("gemm_run1.json") + load_measured("gemm_run2.json")
    fractions = np.arange(0.50, 1.001, 0.01)
    out: dict[str, dict[float, tuple[float, float, float, float]]] = {}
    for dtype in ("bf16", "fp8"):
        mine = [p for p in points if p["dtype"] == dtype]
        seconds = np.array([p["seconds"] for p in mine])
        mem = np.array([product_bytes(p) for p in mine]) / (product.hbm_gbps * 1e9)
        peak = product.tflops("fp8" if dtype == "fp8" else "16bit") * 1e12
        comp = np.array([2 * p["rows_run"] * p["k"] * p["n"] for p in mine]) / peak
        out[dtype] = {}
        for p in CORNERS:
            best = (math.inf, 0.0, 0.0, 0.0)
            m = (mem / fractions[:, None]) ** p  # (fractions, points)
            c = (comp / fractions[:, None]) ** p
            both = (m[:, None, :] + c[None, :, :]) ** (1 / p)
            for t0 in np.arange(0.0, 12e-6, 1e-6):
                err = np.mean(np.log((t0 + both) / seconds) ** 2, axis=2)
                i, j = np.unravel_index(np.argmin(err), err.shape)
                if err[i, j] < best[0]:
                    best = (float(err[i, j]), float(fractions[i]), float(fractions[j]), float(t0))
            out[dtype][p] = best
    return out


def measured_corner() -> float:
    """The corner exponent p that fits the H200's bf16 and fp8 products best together (the sum of their errors)."""
    errors = corner_errors()
    return min(CORNERS, key=lambda p: sum(errors[dtype][p][0] for dtype in errors))


def corner_fit() -> None:
    for dtype, by_p in corner_errors().items():
        timings = sum(1 for p in load_measured("gemm_run1.json") + load_measured("gemm_run2.json")
                      if p["dtype"] == dtype)
        print(f"{dtype} products on the {MEASURED_PRODUCT} ({timings} timings):")
        for p, (err, b, c, t0) in by_p.items():
            print(f"  p {p:4g}: mean squared log error {err:.4f} at bandwidth {b:.2f}, compute "
                  f"{c:.2f}, {t0 * 1e6:.0f} us a product")
    print(f"The model's corner: p = {measured_corner():g} (the least error over both precisions)")


def _measured_shape(p: dict, eff: Efficiency) -> Model:
    """The model of the shape a layer_kernels.json point ran (bf16 on the H200, one GPU's shard)."""
    preset, tp = ("llama-3.1-8b", 1) if p["model"].startswith("llama-3.1-8b") else ("llama-3.1-70b", 4)
    row = Row("measured", str(MEASURED), preset, MEASURED_PRODUCT, tp, "bf16", 1, 2, concurrency=1.0)
    return model_for(row, eff)[0]


def model_prompt_layer_s(p: dict, eff: Efficiency) -> float:
    """The model's time for one layer of what layer_kernels.py replayed at point p: a prompt of p["tokens"] tokens
    through one decoder layer (causal attention over the prompt itself, no KV cache read; layer_kernels.layer_step),
    without the step's lm_head and all-reduces (the replayed layer had neither)."""
    model = _measured_shape(p, eff)
    m = float(p["tokens"])
    seconds, comm_s, _ = model.step(0.0, m, m, m)
    lm_head_bytes = model.arch.vocab_size * model.arch.hidden_size * memory.EMBEDDING_BYTES_PER_PARAM / model.tp
    lm_head_s = max(lm_head_bytes / model.bw, model.lm_head_flops / model.flops)
    return (seconds - comm_s - lm_head_s) / model.layers


def measured_layer_overhead(bandwidth: float, max_tokens: int = 64, corner: float = 0.0) -> float:
    """The fixed cost of one layer in a step: what the measured layers at 1-max_tokens tokens (weights streaming,
    not compute-bound) took beyond the model's time for the same work at `bandwidth` (model_prompt_layer_s), as the
    intercept at zero tokens of a least-squares line through those residuals against the tokens. The line's slope
    (stock unfused norms, rotary and activation kernels growing with the tokens) is not a fixed cost and is left
    out: at large batches the fitted compute fraction carries per-token work."""
    eff = Efficiency(bandwidth=bandwidth, compute=_COMPUTE_MAX, layer_overhead_s=0.0, corner=corner)
    points = [(float(p["tokens"]), p["layer_graph"] - model_prompt_layer_s(p, eff))
              for p in load_measured("layer_kernels.json") if p["tokens"] <= max_tokens]
    return statistics.linear_regression([m for m, _ in points], [r for _, r in points]).intercept


def model_layer_s(eff: Efficiency) -> list[float]:
    """The model's time for one layer of the measured one-token step, bf16 on the H200, per measured shape (the
    order of measured_layers)."""
    return [model_prompt_layer_s(p, eff) for p in load_measured("layer_kernels.json") if p["tokens"] == 1]


_BW_MAX, _COMPUTE_MAX = measured_peaks()


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

# Held out of the fit (measured on the H200, above): the weights stream at the best fraction a product reached, and
# a layer's fixed cost in a step is what the replayed layers took beyond that. A fit on the max-throughput tables
# put 153 us on each layer (a 70B TP2 step half overhead), which low-load rows contradict; issue 45 item 4.
# The roofline's corner likewise: how much longer than max(memory, compute) the products near it took (p = 4; the
# experts of an MoE model run there, at k/E of a step's tokens).
MEASURED_CONSTANTS = {"bandwidth": round(_BW_MAX, 2), "corner": measured_corner()}
MEASURED_CONSTANTS["layer_overhead_s"] = round(
    measured_layer_overhead(MEASURED_CONSTANTS["bandwidth"], corner=MEASURED_CONSTANTS["corner"]), 6)
# Bounds of the search: compute at most what the H200's products reached (above); fp4 tensor math (no Blackwell
# measured) at most its peak; an all-reduce moves data at 20-100 % of the link's per-direction bandwidth; the KV
# cache of a big batch read at 20 % up to the weights' fraction (paged reads of many short blocks).
BOUNDS = {"compute": (0.15, round(_COMPUTE_MAX, 2)), "compute_fp4": (0.15, 1.0), "link_bandwidth": (0.2, 1.0),
          "kv_bandwidth": (0.2, MEASURED_CONSTANTS["bandwidth"])}
START = {"compute": 0.5, "compute_fp4": 0.5, "link_bandwidth": 1.0, "kv_bandwidth": 0.7}
LOW_LOAD = 8  # requests in flight at most: the validation rows of "batch-1" time per token (issue 45)


def loss(eff: Efficiency, fit_rows: list[Row]) -> float:
    return statistics.fmean(math.log(predict(r, eff).output_tokens_per_s / (r.throughput or 1)) ** 2
                            for r in fit_rows)


def fit(fit_rows: list[Row], rounds: int = 10) -> Efficiency:
    """Coordinate descent, golden-section search on each constant in turn (squared log error of throughput)."""
    current = {**START, **MEASURED_CONSTANTS}
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
                      round(eff.compute_fp4, 2), round(eff.link_bandwidth, 2), round(eff.kv_bandwidth, 2), eff.corner)


# ---- report ----

def describe(eff: Efficiency) -> str:
    return (f"bandwidth {eff.bandwidth:.2f} of peak HBM, compute {eff.compute:.2f} of peak dense TFLOPS, "
            f"fp4 compute {eff.compute_fp4:.2f}, {eff.layer_overhead_s * 1e6:.0f} us a layer a step, "
            f"all-reduces at {eff.link_bandwidth:.2f} of the link's bandwidth, "
            f"KV cache read at {eff.kv_bandwidth or eff.bandwidth:.2f} of peak HBM, "
            + (f"roofline corner p = {eff.corner:g}" if eff.corner else "a sharp roofline corner (max)"))


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


def published_in_flight(row: Row) -> float:
    """Requests in flight as the source measured them: the concurrency, or for an open-loop row Little's law on its
    published figures (rate x (TTFT + (O - 1) x time per token)); independent of the model's constants."""
    if row.concurrency is not None or row.rate is None:
        return row.concurrency or math.inf
    return row.rate * ((row.ttft_ms or 0.0) + (row.osl - 1) * (row.tpot_ms or 0.0)) / 1e3


def low_load_tpot(eff: Efficiency) -> list[tuple[Row, Prediction, float]]:
    """Validation rows with a time per token at 1-LOW_LOAD requests in flight (published_in_flight):
    (row, prediction, error)."""
    results, _ = evaluate("validation", eff)
    return [(row, pred, e["tpot"]) for row, pred, e in results
            if "tpot" in e and published_in_flight(row) <= LOW_LOAD]


def _fmt(row: Row, pred: Prediction, e: dict[str, float]) -> str:
    parts = []
    for m, unit, got in (("throughput", "tok/s", pred.output_tokens_per_s), ("tpot", "ms/tok", pred.tpot_ms),
                         ("ttft", "ms TTFT", pred.ttft_ms)):
        if m in e:
            pub_v = row.published()[m]
            parts.append(f"{m} {got:,.1f} vs {pub_v:,.1f} {unit} ({e[m]:+.0%})")
    return f"  {row.label:<58} " + "; ".join(parts)


def deepseek_guide() -> list[tuple[tuple, bool, float, int]]:
    """TensorRT-LLM's DeepSeek-R1 max-throughput runs (attention DP x8, EP8) predicted with and without attention
    DP: (row, attention DP, predicted output tokens/s, requests the KV cache holds)."""
    out = []
    for row in pub.DEEPSEEK_GUIDE_ADP:
        gpu, quant, kv, tp, per_rank, max_tokens, fraction, conc, isl, osl, _published = row
        product = product_info(gpu)
        for adp in (True, False):
            engine = EngineSpec(quantization=quant, kv_cache_dtype=kv, max_batch_size=min(per_rank * tp, 4096),
                                max_num_tokens=max_tokens, max_input_len=isl, max_seq_len=isl + osl,
                                kv_cache_free_gpu_mem_fraction=fraction, kv_cache_min_sequences=1)
            arch = PRESETS["deepseek-r1"]
            f = memory.fit(memory.estimate(arch, engine, tp, 1, adp), product.memory_mib * 1024 * 1024, engine,
                           product.reserve_fraction)
            est = roofline.estimate(arch, engine, product, tp, 1, roofline.tp_link(product, roofline.LINK_NVLINK),
                                    None, f.kv_capacity, Workload(isl, osl, conc), adp)
            out.append((row, adp, est.tokens_per_second, f.concurrency))
    return out


def _print_summary(title: str, s: dict) -> None:
    print(title)
    for m, (n, med, within) in s.items():
        print(f"  {m:<10} rows {n:>3}  median |error| {med:5.1%}  within +-30 %: {within:5.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--summary", action="store_true", help="only the fit and the summaries")
    parser.add_argument("--corner", action="store_true", help="fit the measured products' roofline corner, then stop")
    args = parser.parse_args(argv)
    if args.corner:
        corner_fit()
        return 0
    fit_rows = [r for r in rows() if r.set == "fit"]
    eff = rounded(fit(fit_rows))
    print(f"Measured on an {MEASURED_PRODUCT} ({MEASURED.relative_to(ROOT)}): products streamed at up to "
          f"{_BW_MAX:.2f} of the data sheet's HBM bandwidth and computed at up to {_COMPUTE_MAX:.2f} of its dense "
          f"peak (the weights' bandwidth and the search's upper bound on compute); a layer's fixed cost in a step "
          f"{MEASURED_CONSTANTS['layer_overhead_s'] * 1e6:.0f} us. A bf16 decoder layer at one token, replayed from a "
          f"graph, against the model's decode step at one sequence (committed constants, all-reduces left out):")
    for (measured, weights), modelled in zip(measured_layers(), model_layer_s(CALIBRATED), strict=True):
        print(f"  {weights / 1e6:4.0f} MB of weights: measured {measured * 1e6:4.0f} us, model {modelled * 1e6:4.0f} us "
              f"({modelled / measured - 1:+.0%})")
    print()
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
    low = low_load_tpot(CALIBRATED)
    print(f"\nLow load: validation rows with time per token at most {LOW_LOAD} requests in flight (never fitted):")
    for row, pred, e in low:
        print(f"  {row.label:<58} {published_in_flight(row):4.1f} in flight: tpot {pred.tpot_ms:5.1f} vs {row.tpot_ms:5.1f} "
              f"ms/tok ({e:+.0%})")
    print(f"  rows {len(low)}, median |error| {statistics.median(abs(e) for _, _, e in low):.1%}, "
          f"within +-20 %: {sum(abs(e) <= 0.20 for _, _, e in low)}/{len(low)}")
    print(f"\nAttention data parallelism: {pub.DEEPSEEK_GUIDE_SOURCE} (not fitted), DeepSeek-R1 TP8 EP8 "
          "1024/2048 tokens:")
    for row, adp, predicted, held in deepseek_guide():
        layout = "attention DP x8" if adp else "TP8 attention  "
        print(f"  {row[0].replace('NVIDIA-', ''):<5} {row[1]:<5} {layout} at {row[7]:>4} requests: KV holds "
              f"{held:>5,}, predicted {predicted:>8,.0f} vs published {row[-1]:>8,.0f} tok/s "
              f"({predicted / row[-1] - 1:+.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
