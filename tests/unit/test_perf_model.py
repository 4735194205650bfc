"""Performance model: the physics it claims, the calibration it ships, and its error on published figures it never saw."""

from __future__ import annotations

import dataclasses

import pytest
from benchmark_support import load_benchmark

from llmbackend.api.catalog import PRESETS
from llmbackend.api.v1alpha1 import EngineSpec
from llmbackend.planning import memory, roofline
from llmbackend.planning.inventory import product_info
from llmbackend.planning.perf_model import CALIBRATED, Hardware, Model, Workload

L8, L70, MIXTRAL = PRESETS["llama-3.1-8b"], PRESETS["llama-3.1-70b"], PRESETS["mixtral-8x7b"]
H100 = product_info("NVIDIA-H100-80GB-HBM3")
FP8 = EngineSpec(quantization="fp8", max_batch_size=1024, max_input_len=8192, max_seq_len=16384)


def h100(tp: int = 1, pp: int = 1) -> Hardware:
    link = roofline.tp_link(H100, roofline.LINK_NVLINK)
    return Hardware(H100.hbm_gbps, H100.tflops("fp8"), link if tp > 1 else None,
                    roofline.network_link() if pp > 1 else None, H100.tflops("fp8"), "fp8")


def model(arch=L8, engine=FP8, tp=1, pp=1, eff=CALIBRATED) -> Model:
    return Model(arch, engine, h100(tp, pp), tp, pp, eff)


def kv_capacity(arch=L8, engine=FP8, tp=1, pp=1) -> int:
    mem = memory.estimate(arch, engine, tp, pp)
    return memory.fit(mem, H100.memory_mib * 1024 * 1024, engine, H100.reserve_fraction).kv_capacity


# ---- physics ----

def test_prefill_grows_with_input_length():
    m = model()
    ttft = [m.predict(Workload(isl, 128, 1), kv_capacity()).ttft_ms for isl in (128, 1024, 4096, 8192)]
    assert ttft == sorted(ttft) and ttft[-1] > 4 * ttft[1]
    # Long prompts are compute: 8192 tokens x 2 x ~7B parameters at the fp8 peak, give or take the efficiency.
    flops = 2 * 7e9 * 8192
    assert ttft[-1] / 1e3 > flops / (H100.tflops("fp8") * 1e12)


def test_decode_becomes_compute_bound_at_large_batch():
    m = model()
    small = m.step(decode=1, prefill=0, context=1024, prompt=1024)
    large = m.step(decode=4096, prefill=0, context=1024, prompt=1024)
    assert small[2] is False and large[2] is True  # linear layers: weights stream at batch 1, FLOPs at 4096
    # Per token, the big batch is far cheaper (weights read once for all), but not free.
    assert large[0] / 4096 < small[0] / 20


def test_time_per_token_grows_with_concurrency_and_throughput_saturates():
    m = model()
    preds = [m.predict(Workload(1000, 1000, c), kv_capacity()) for c in (1, 8, 64, 512)]
    tpots = [p.tpot_ms for p in preds]
    tputs = [p.output_tokens_per_s for p in preds]
    assert tpots == sorted(tpots) and tputs == sorted(tputs)
    assert tputs[1] / tputs[0] > 5 and tputs[3] / tputs[2] < 8  # near-linear at first, then it bends


def test_long_prompts_short_answers_make_fewer_output_tokens_than_the_reverse():
    """Done-when of issue 28: Llama-3.1-8B fp8 on one H100, 2048/128 vs 128/2048 (NVIDIA: 3,450 vs 22,714 tok/s)."""
    cal = load_benchmark("perf_calibrate")
    rows = {(r.isl, r.osl): r for r in cal.rows()
            if r.set == "fit" and r.preset == "llama-3.1-8b" and r.gpu == "NVIDIA-H100-80GB-HBM3"}
    long_prompt = cal.predict(rows[2048, 128], CALIBRATED).output_tokens_per_s
    long_answer = cal.predict(rows[128, 2048], CALIBRATED).output_tokens_per_s
    assert rows[2048, 128].throughput < rows[128, 2048].throughput  # what NVIDIA measured
    assert long_prompt < long_answer / 3


def test_pipeline_stages_add_bubbles_and_hops():
    one = model(L70, tp=4).predict(Workload(1000, 1000, 1), kv_capacity(L70, tp=4))
    two = model(L70, tp=4, pp=2)
    alone = two.predict(Workload(1000, 1000, 1), kv_capacity(L70, tp=4, pp=2))
    assert alone.pipeline_idle == 0.5  # one request: one micro-batch for two stages
    assert alone.tpot_ms > one.tpot_ms  # each token crosses both stages plus a network hop
    busy = two.predict(Workload(1000, 1000, 64), kv_capacity(L70, tp=4, pp=2))
    assert busy.pipeline_idle == 0.0 and busy.output_tokens_per_s > 10 * alone.output_tokens_per_s


def test_tensor_parallel_pays_all_reduces():
    tp1, tp2 = model(L8, tp=1), model(L8, tp=2)
    assert tp1.allreduce_s(64) == 0.0 and tp2.allreduce_s(64) > 0
    assert tp2.allreduce_s(8192) > tp2.allreduce_s(1)  # bigger messages at bigger steps


def test_moe_computes_with_active_parameters_and_reads_touched_experts():
    dense_twin = MIXTRAL.model_copy(update=dict(num_experts=None, num_experts_per_token=None,
                                               active_parameter_count=None))
    engine = EngineSpec(quantization="fp8")
    moe, dense = model(MIXTRAL, engine), model(dense_twin, engine)
    # FLOPs per token follow the active parameters (12.9B of 46.7B), not all experts.
    assert moe.flops_per_token < 0.35 * dense.flops_per_token
    # One token reads the shared part and 2 of 8 experts; a big step touches them all.
    assert moe._read_fraction(1) < 0.35 and moe._read_fraction(512) > 0.99
    one_moe = moe.step(decode=1, prefill=0, context=512, prompt=512)[0]
    one_dense = dense.step(decode=1, prefill=0, context=512, prompt=512)[0]
    assert one_moe < one_dense


def test_kv_cache_and_max_batch_cap_what_is_in_flight():
    small = EngineSpec(quantization="fp8", max_batch_size=8)
    p = model(L8, small).predict(Workload(1000, 1000, 32), kv_capacity(L8, small))
    assert p.in_flight == 8 and p.waiting == 24
    alone = model(L8, small).predict(Workload(1000, 1000, 8), kv_capacity(L8, small))
    assert p.ttft_ms > 2 * alone.ttft_ms  # the 24 waiting requests' wait shows in TTFT


def test_one_output_token_is_all_prefill():
    """Scoring-like traffic (O = 1): no decode; prompt tokens/s cannot beat the compute the prompts need."""
    m = model()
    preds = [m.predict(Workload(2000, 1, c), kv_capacity()) for c in (1, 4, 64)]
    assert preds[0].tpot_ms == 0 and preds[0].ttft_ms > 0
    assert preds[1].output_tokens_per_s > preds[0].output_tokens_per_s  # batching prompts helps a little
    prompt_tokens_per_s = preds[2].output_tokens_per_s * 2000
    assert prompt_tokens_per_s * 2 * 7e9 < H100.tflops("fp8") * 1e12  # under the peak
    assert preds[2].ttft_ms > 10 * preds[0].ttft_ms  # 64 prompts queue for the step budget


def test_arrival_rate_builds_concurrency():
    m = model()
    low, high = (m.at_rate(500, 200, rate, kv_capacity()) for rate in (1.0, 20.0))
    assert low.in_flight < high.in_flight and low.tpot_ms <= high.tpot_ms
    # Little's law closes: the rate times the request time is what is in flight.
    e2e = (high.ttft_ms + 199 * high.tpot_ms) / 1e3
    assert high.in_flight == pytest.approx(20.0 * e2e, rel=0.05)


# ---- calibration ----

def test_committed_constants_are_the_scripts_measurement_and_fit():
    """CALIBRATED's measured constants are the script's H200 figures, and the others a minimum of the fitting loss
    within their rounding (the script's fit, not hand-set)."""
    cal = load_benchmark("perf_calibrate")
    assert set(cal.MEASURED_CONSTANTS) == {"bandwidth", "layer_overhead_s", "corner"}
    assert not set(cal.MEASURED_CONSTANTS) & set(cal.BOUNDS)  # held out of the search
    for name, value in cal.MEASURED_CONSTANTS.items():
        assert getattr(CALIBRATED, name) == pytest.approx(value, abs=1e-6), name
    fit_rows = [r for r in cal.rows() if r.set == "fit"]
    base = cal.loss(CALIBRATED, fit_rows)
    steps = {"compute": 0.02, "compute_fp4": 0.02, "link_bandwidth": 0.02, "kv_bandwidth": 0.02}
    assert set(steps) == set(cal.BOUNDS)
    for name, step in steps.items():
        for sign in (-1, 1):
            value = getattr(CALIBRATED, name) + sign * step
            lo, hi = cal.BOUNDS[name]
            if lo <= value <= hi:
                other = dataclasses.replace(CALIBRATED, **{name: value})
                assert cal.loss(other, fit_rows) >= base - 1e-3, (name, value)


def test_a_layers_fixed_cost_is_measured_not_fitted():
    """Issue 45 item 4: the fixed cost of a layer in a step comes from the H200's replayed layers (78 us), not from
    the max-throughput tables (whose fit put 153 us there); it is what a layer took beyond its weights."""
    cal = load_benchmark("perf_calibrate")
    overhead = cal.measured_layer_overhead(CALIBRATED.bandwidth)
    layers = cal.measured_layers()
    assert 30e-6 < overhead < 100e-6
    assert all(overhead < seconds / 2 for seconds, _ in layers)  # most of a layer at one token is its weights


def test_the_fixed_cost_is_measured_against_the_work_the_replayed_layer_did():
    """layer_kernels.py replays a layer over an m-token prompt (causal attention, no KV cache) and no lm_head: the
    model's time it is held against is that work, so it hardly grows from 1 to 64 tokens (weights streaming). The
    former comparison charged 64 sequences' KV cache reads at 1,024 tokens the layer never made, and the lm_head and
    embedding spread over the layers, and put the fixed cost at 66 us."""
    cal = load_benchmark("perf_calibrate")
    eff = dataclasses.replace(CALIBRATED, layer_overhead_s=0.0)
    points = {(p["model"], p["tokens"]): p for p in cal.load_measured("layer_kernels.json")}
    for shape in ("llama-3.1-8b TP1", "llama-3.1-70b TP4"):
        one, many = (cal.model_prompt_layer_s(points[shape, m], eff) for m in (1, 64))
        assert many == pytest.approx(one, rel=0.02), shape
    # 8B: a layer's weights at 0.92 of the H200's bandwidth, nothing of the lm_head.
    assert cal.model_prompt_layer_s(points["llama-3.1-8b TP1", 1], eff) == pytest.approx(
        436e6 / (4.8e12 * 0.92), rel=0.03)
    # The fixed cost is the intercept of the residuals against the tokens (they grow with unfused per-token kernels).
    assert 75e-6 < cal.measured_layer_overhead(CALIBRATED.bandwidth) < 82e-6


def test_a_step_gathers_the_input_embedding_and_streams_the_lm_head():
    """A step looks up its tokens' rows of the input embedding and reads the lm_head whole: an untied model's step
    at one token reads its weights less the embedding table; a tied table (it is the lm_head) is read whole, and so
    is a pipeline stage's one table (it may be the lm_head)."""
    embed = L8.vocab_size * L8.hidden_size * memory.EMBEDDING_BYTES_PER_PARAM
    one = model()
    assert one._weights_read(1) == pytest.approx(one.weights - embed)
    assert model(tp=2)._weights_read(1) == pytest.approx(model(tp=2).weights - embed / 2)
    assert model(pp=2)._weights_read(1) == pytest.approx(model(pp=2).weights)
    tied = model(PRESETS["gemma-3-27b"], EngineSpec(quantization="fp8"))
    assert tied._weights_read(1) == pytest.approx(tied.weights)


def test_an_moe_decode_step_reads_the_experts_its_tokens_are_routed_to():
    """DeepSeek-R1 (1 shared + 256 routed experts, 8 routed a token: DeepSeek-V3 technical report, arXiv 2412.19437,
    section 2.1.2) at batch b reads the non-expert weights and the shared expert whole and, with routing assumed
    uniform and independent across tokens, 256 x (1 - (1 - 8/256)^b) distinct routed experts (no MoE layer has
    been measured; docs/performance-model.md)."""
    ds = PRESETS["deepseek-r1"]
    m = model(ds, EngineSpec(quantization="fp8"), tp=8)
    experts, k = ds.num_experts, ds.num_experts_per_token
    routed = m.weights * experts * (ds.parameter_count - ds.active_parameter_count) / (experts - k) / ds.parameter_count
    rest = m.weights - routed - m.gathered
    for b in (1, 8, 64):
        touched = experts * (1 - (1 - k / experts) ** b)
        assert m._weights_read(b) == pytest.approx(rest + routed * touched / experts, rel=1e-6), b
    assert m._weights_read(1) < 0.06 * m.weights  # batch 1: 8 of 256 experts, about 37B of 671B parameters


def test_an_moe_steps_experts_are_kernels_of_their_own():
    """The routed experts run as their own grouped GEMMs (TensorRT-LLM's CutlassMoeFCRunner::runMoe), each expert at
    k/E of the step's tokens: at a batch where the attention projections and lm_head compute but the experts still
    stream their weights, the step pays both. One max() over the whole step let the dense part's math hide the
    experts' weights (Mixtral over-predicted by +21 % median on the validation tables)."""
    sharp = dataclasses.replace(CALIBRATED, corner=0.0)
    m = model(PRESETS["deepseek-r1"], EngineSpec(quantization="fp8"), tp=8, eff=sharp)
    tokens = 4096.0
    routed_w = m.routed_weights * m._touched(tokens) / m.bw
    dense_w = (m._weights_read(tokens) / m.bw) - routed_w
    routed_mm = m.flops_per_token * m.routed_flops_share * tokens / m.flops
    dense_mm = m.flops_per_token * (1 - m.routed_flops_share) * tokens / m.flops + m.lm_head_flops * tokens / m.flops
    assert routed_w > routed_mm and dense_mm > dense_w  # experts stream, the rest computes
    assert dense_mm + routed_mm > dense_w + routed_w  # so one max() over the step would say "compute" and stop there
    kv_s = tokens * m.kv_bytes(1024) / m.kv_bw
    attn_s = 4 * m.layers * m.decode_attn_width * tokens * 1024 / m.attn_flops_rate
    rest = max(kv_s, attn_s) + m.allreduce_s(tokens) + m.layers * sharp.layer_overhead_s
    seconds, _, _ = m.step(tokens, 0.0, 1024, 1024)
    assert seconds == pytest.approx(dense_mm + routed_w + rest, rel=1e-9)
    assert seconds > max(dense_w + routed_w, dense_mm + routed_mm) + rest
    # A dense model has one group: its step is the corner of all its weights and all its FLOPs.
    dense = model(eff=sharp)
    assert dense.routed_weights == 0 and dense.routed_flops_share == 0


def test_a_kernel_near_the_roofline_corner_takes_longer_than_either_bound():
    """The H200's measured products are fitted best with a kernel's time (memory^p + compute^p)^(1/p) at p = 4
    (benchmarks/perf_calibrate.py --corner), not max(): where streaming and math take as long as each other the
    kernel takes 2^(1/4) = 1.19 times either; far from the corner the larger one alone."""
    cal = load_benchmark("perf_calibrate")
    assert cal.measured_corner() == CALIBRATED.corner == 4.0
    errors = cal.corner_errors()
    for dtype in ("bf16", "fp8"):  # each precision alone: p = 4 beats the sharp max (p = 50) and added times (p = 1)
        assert errors[dtype][4.0][0] < min(errors[dtype][50.0][0], errors[dtype][1.0][0])
    assert CALIBRATED.roofline_s(1.0, 1.0) == pytest.approx(2 ** 0.25)
    assert CALIBRATED.roofline_s(1.0, 0.1) == pytest.approx(1.0, rel=1e-4)
    assert CALIBRATED.roofline_s(0.0, 0.0) == 0.0
    assert dataclasses.replace(CALIBRATED, corner=0.0).roofline_s(1.0, 1.0) == 1.0


def test_prompts_come_whole_into_the_steps_the_decoders_run():
    """TensorRT-LLM runs a prompt that fits the step's token budget in one step beside the decoders
    (MicroBatchScheduler::operator()), so at a steady stream of 467-token prompts a share of the steps carries a whole
    prompt (compute-bound) and the rest none. A step's time is convex in its tokens: the mean over those steps is
    more than one step with the prompts' tokens spread evenly, and more so the more of the step the prompt is."""
    m = model()
    chunk, decode, context = 467.0, 4.0, 700.0
    prefill = 0.3 * chunk  # three steps in ten carry a prompt
    empty, _, _ = m.step(decode, 0.0, context, chunk)
    full, _, _ = m.step(decode, chunk, context, chunk)
    spread, _, _ = m.step(decode, prefill, context, chunk)
    mean, _, _ = m.whole_chunks_step(decode, prefill, context, chunk, chunk)
    assert mean == pytest.approx(0.7 * empty + 0.3 * full)
    assert mean > 1.1 * spread
    # Whole chunks already: nothing to average; a chunk that would not fit the step's budget is chunked to fit it.
    assert m.whole_chunks_step(decode, 2 * chunk, context, chunk, chunk)[0] == pytest.approx(
        m.step(decode, 2 * chunk, context, chunk)[0])
    assert m.whole_chunks_step(decode, prefill, context, chunk, chunk, cap=400)[0] == pytest.approx(spread)
    # This request's own prompt step carries its chunk and the others' as whole chunks.
    own, _, _ = m.whole_chunks_step(decode, prefill, context, chunk, chunk, own=chunk)
    assert own == pytest.approx(0.7 * full + 0.3 * m.step(decode, 2 * chunk, context, chunk)[0])
    # At a rate: 16-token answers behind 467-token prompts wait longer than with the prompts spread evenly.

    class EvenSpread(Model):
        def whole_chunks_step(self, decode, prefill, context, prompt, chunk, own=0.0, cap=float("inf")):
            return self.step(decode, own + prefill, context, prompt)

    even = EvenSpread(L8, FP8, h100(), 1, 1, CALIBRATED)
    assert m.at_rate(467, 16, 32.0, kv_capacity()).tpot_ms > 1.05 * even.at_rate(467, 16, 32.0, kv_capacity()).tpot_ms
    # Alone (no one else's prompt in the steps), nothing changes.
    assert m.at_rate(467, 16, 2.0, kv_capacity()).tpot_ms == pytest.approx(
        even.at_rate(467, 16, 2.0, kv_capacity()).tpot_ms)


# Issue 45's done-when: time per token at 1-8 requests in flight within +-20 % on the validation rows. All 27 are,
# with the others' prompts whole in the steps they share (above); with an even spread of prefill over the steps, the
# v0.14 rows of 16-token answers behind 467-token prompts at the highest rates were -21 % to -33 %
# (docs/performance-model.md, "Low-load time per token").
def test_low_load_time_per_token_within_20_percent():
    cal = load_benchmark("perf_calibrate")
    low = cal.low_load_tpot(CALIBRATED)
    assert len(low) >= 25
    assert any(r.concurrency == 1 for r, _, _ in low) and any(r.rate is not None for r, _, _ in low)
    outside = {(r.preset, r.gpu, r.isl, r.osl, r.rate, round(e, 2)) for r, _, e in low if abs(e) > 0.20}
    assert not outside, outside


def test_fit_and_validation_rows_are_apart_and_cited():
    cal = load_benchmark("perf_calibrate")
    rows = cal.rows()
    fit = [r for r in rows if r.set == "fit"]
    validation = [r for r in rows if r.set == "validation"]
    assert len(fit) >= 90 and len(validation) >= 300
    assert {r.source for r in fit} == {cal.pub.FIT_SOURCE}
    assert all(r.source != cal.pub.FIT_SOURCE for r in validation)
    assert all(r.source for r in rows)


# The tolerance on figures the fit never saw: median |error| <= 20 % and >= 80 % of rows within +-30 %,
# per metric. Where the model falls short, the test says so (xfail, strict: it fails once the model gets there,
# so the marker cannot outlive the shortfall). Measured: see docs/performance-model.md.
_SHORT = {
    ("ttft", "median"): "median 22.3 %: with a layer's fixed cost measured (78 us) instead of fitted (153 us), the "
                        "v0.14 online rows' TTFT is under-predicted at every load, most for 202-token prompts (at 2-4 "
                        "requests/s 8B 6-8 ms short, 70B TP4 11-16 ms; 467-token prompts 3-5 and 3-9 ms): time outside "
                        "the engine's steps (HTTP, tokenizer, Triton ensemble) that neither the fitting tables nor the "
                        "H200 kernels measure; "
                        "the fitted 153 us, charged on a request's prompt step and half a step of wait, hid it "
                        "(docs/performance-model.md, 'Why time to first token moved')",
    ("ttft", "within"): "74 % of TTFT rows within +-30 % (short prompts under-predicted, as above)",
}


@pytest.mark.parametrize("metric", ["throughput", "tpot", "ttft"])
@pytest.mark.parametrize("criterion", ["median", "within"])
def test_validation_table_within_tolerance(metric, criterion, request):
    if (metric, criterion) in _SHORT:
        request.applymarker(pytest.mark.xfail(strict=True, reason=_SHORT[metric, criterion]))
    cal = load_benchmark("perf_calibrate")
    _, summary = cal.evaluate("validation", CALIBRATED)
    rows, median, within = summary[metric]
    assert rows >= 5
    if criterion == "median":
        assert median <= 0.20, f"{metric}: median |error| {median:.1%}"
    else:
        assert within >= 0.80, f"{metric}: {within:.1%} within +-30 %"


# ---- held against measurements on an H200 (benchmarks/data/h200/, benchmarks/gemm_roofline.py, layer_kernels.py) ----

def test_the_searchs_upper_bounds_are_what_the_h200_reached():
    """The fit may not assume kernels faster than the measured ones: its bandwidth and compute bounds are the best
    fractions of the data sheet any measured product reached, and those are physical (below the data sheet)."""
    cal = load_benchmark("perf_calibrate")
    bandwidth, compute = cal.measured_peaks()
    assert 0.5 < bandwidth <= 1.0 and 0.5 < compute <= 1.0
    assert cal.MEASURED_CONSTANTS["bandwidth"] == round(bandwidth, 2)
    assert cal.BOUNDS["compute"][1] == round(compute, 2)
    assert CALIBRATED.compute <= cal.BOUNDS["compute"][1] and CALIBRATED.kv_bandwidth <= CALIBRATED.bandwidth


def test_measured_products_stream_at_few_tokens_and_compute_at_many():
    """The measurement shows the roofline the model assumes: a product's time hardly moves from 1 to 64 tokens
    (its weights stream) and grows about linearly from 2048 to 8192 (tensor math)."""
    cal = load_benchmark("perf_calibrate")
    times = {(p["model"], p["dtype"], p["matrix"], p["tokens"]): p["seconds"] for p in cal.load_measured("gemm_run1.json")}
    for model, dtype, matrix, tokens in times:
        if tokens == 1:
            assert times[model, dtype, matrix, 64] / times[model, dtype, matrix, 1] < 1.25
            assert 3.0 < times[model, dtype, matrix, 8192] / times[model, dtype, matrix, 2048] < 5.0


def test_a_decode_layer_at_one_sequence_costs_what_the_h200_measured():
    cal = load_benchmark("perf_calibrate")
    for (measured, _), modelled in zip(cal.measured_layers(), cal.model_layer_s(CALIBRATED), strict=True):
        assert modelled == pytest.approx(measured, rel=0.20)
