"""Fifth attacker pass on the GPU pool: the fourth pass's fixes (the /metrics line filter, the bounded readings, the
drain order and warning, the slot guard). Pure-function probes: a strict xfail is a break (severity in its reason),
a passing test is a probe that held.

Seat: a tenant who may create LLMBackends in its own namespace and chooses spec.engine.image, so the /metrics text
the operator scrapes from its pods is its own.
"""

from __future__ import annotations

import math

import pytest
from cpu_probe import quiet_cpu_s

from llmbackend.api import engine_metrics as EM
from llmbackend.autoscaling import ratio as R
from llmbackend.autoscaling.drain import deletion_costs, drain_warning
from llmbackend.autoscaling.engine import EngineView

Q, C, N = EM.ENGINE_QUEUE_METRIC, EM.ENGINE_COMPUTE_METRIC, EM.ENGINE_REQUESTS_METRIC


def _cpu_s(text: str) -> float:
    return quiet_cpu_s(lambda: R.parse_metrics_text(text, "m", R.SIGNAL_ENGINE), runs=1)


def _ordinary(size: int) -> str:
    """A body of ``size`` bytes of ordinary lines of the metrics the operator reads (what a serving pod writes)."""
    line = f'{Q}{{model="m",version="1"}} 12345\n'
    return line * (size // len(line))


def _escaped_quotes(size: int) -> str:
    """One line of the queue metric whose label value is ``\\"`` repeated: prometheus_client's label parser copies the
    value up to each quote to check whether that quote is escaped (parser.py parse_labels: ``value_term[:i]``)."""
    return f'{Q}{{model="m",x="' + '\\"' * (size // 2) + f'"}} 1\n{C}{{model="m"}} 1\n'


def _many_labels(size: int) -> str:
    """One line of the queue metric with thousands of distinct labels: prometheus_client copies the rest of the line
    for each label (parser.py _next_term / _next_unquoted_char: ``text[startidx:]``, ``text[splitpos + 1:]``)."""
    labels, length = [], 0
    while length < size:
        labels.append(f'a{len(labels)}=""')
        length += len(labels[-1]) + 1
    return f'{Q}{{model="m",' + ",".join(labels) + f'}} 1\n{C}{{model="m"}} 1\n'


# Fixed (was a strict xfail): HIGH (every namespace's autoscaling): one line the filter keeps (the queue metric's
# name) costs the parser time quadratic in its length; a 320 KB line of escaped quotes took 0.7 s of CPU here (of
# distinct labels 0.5 s; 8,000 ordinary lines 0.06 s), the 4 MiB the scraper reads ~2 min per pod per sync, in a
# thread no timeout bounds, and _autoscale_loop awaits every _evaluate before the next round and the pool pass: every
# backend of every namespace stops being scaled; live() sees nothing
@pytest.mark.parametrize("hostile", [_escaped_quotes, _many_labels], ids=["escaped_quotes", "many_labels"])
def test_a_pods_metrics_line_costs_the_parser_time_linear_in_its_length(hostile):
    size = 320_000  # 1/13 of MAX_METRICS_BYTES: the attack's cost grows with the square of it
    body = hostile(size)
    assert body.count("\n") <= R.MAX_METRIC_LINES  # the fourth pass's line cap does not apply: two lines
    baseline = min(_cpu_s(_ordinary(len(body))) for _ in range(2))
    cost = _cpu_s(body)
    # an ordinary body of the same size (8,000 lines, the parser's per-line work) bounds what a line may cost
    assert cost <= 3 * baseline + 0.05, f"{cost:.2f}s of CPU for {len(body)} bytes; an ordinary body: {baseline:.2f}s"


def test_the_filter_keeps_tab_separated_and_crlf_lines_and_reads_them_right():
    """Held: whitespace the exposition format allows (tabs, CRLF line ends, a leading blank) is read as the parser
    reads it; a name that only starts with a read name is not read."""
    m = '{model="m"}'
    text = (f"{Q}{m}\t5\r\n  {C} {m} 7\r\n{N}_total\t{m} 3\r\n"
            f"{Q}_extra{m} 1000\n{Q}x{m} 1000\n# {Q}{m} 1000\n")
    counters = R.parse_metrics_text(text, "m", R.SIGNAL_ENGINE)
    assert counters is not None
    assert (counters.queue_us, counters.compute_infer_us, counters.success_count) == (5, 7, 3)
    # CR alone ends no line in the format: the body is one line and no reading (the tenant's own backend only)
    assert R.parse_metrics_text(f"{Q}{m} 5\r{C}{m} 7\r", "m", R.SIGNAL_ENGINE) is None


def test_the_line_cap_bounds_the_lines_kept_whatever_their_name():
    """Held: the cap counts kept lines, so MAX_METRIC_LINES junk lines of a read name end the read there (the tenant hides only
    its own later lines: a wrong reading of its own backend, which its image could write anyway)."""
    junk = f'{Q}{{model="other"}} 1\n' * R.MAX_METRIC_LINES
    reader = R.MetricsReader("m", R.SIGNAL_ENGINE)
    assert not reader.feed((junk + f'{Q}{{model="m"}} 5\n{C}{{model="m"}} 5\n').encode())  # full: no more read
    assert reader.lines_kept == R.MAX_METRIC_LINES and reader.result() is None
    assert R.parse_metrics_text(junk + f'{C}{{model="m"}} 5\n', "m", R.SIGNAL_ENGINE) is None


def test_the_most_hostile_histogram_a_pod_may_write_gives_a_drain_warning_not_an_exception():
    """Held: the largest bound kept (MAX_BUCKET_BOUND_S) and the largest count (MAX_SAMPLE) give a finite p99, and
    drain_warning's suggestion (p99 / fraction / 60, ceil) does not overflow."""
    def body(n: float) -> str:
        return (f'{Q}{{model="m"}} {n}\n{C}{{model="m"}} {n}\n{N}{{model="m"}} {n}\n'
                f'{R._BUCKET_SAMPLE}{{model="m",le="{R.MAX_BUCKET_BOUND_S:g}"}} 0\n'
                f'{R._BUCKET_SAMPLE}{{model="m",le="+Inf"}} {n}\n')
    samples = {"p": [(0.0, R.parse_metrics_text(body(0), "m", R.SIGNAL_ENGINE)),
                     (10.0, R.parse_metrics_text(body(R.MAX_SAMPLE), "m", R.SIGNAL_ENGINE))]}
    reading = R.window_ratio(samples, 10.0, 60.0, R.SIGNAL_ENGINE)
    assert reading.request_p99_s is not None and math.isfinite(reading.request_p99_s)
    assert drain_warning(reading.request_p99_s, 30) is not None
    assert drain_warning(R.MAX_BUCKET_BOUND_S, 30) is not None


def test_deletion_costs_of_extreme_readings_are_valid_annotation_values():
    """Held: a pod-deletion-cost is an int32; the largest and negative readings a pod may write stay within it."""
    costs = deletion_costs({"a": R.MAX_SAMPLE, "b": -R.MAX_SAMPLE, "c": math.nan, "d": math.inf, "e": 5e-324}, {})
    assert costs == {"a": str(2**31 - 1), "b": "0", "e": "0"}


def test_replicas_for_the_largest_load_a_pod_may_write_is_a_bounded_int():
    """Held: the load is capped at 1e9 replicas before the square root and ceil (maxReplicas then caps it)."""
    view = EngineView(in_flight=R.MAX_SAMPLE, slots_per_replica=1.0, forecast=R.MAX_SAMPLE, cold_start_s=0.0,
                      saturated="")
    n = view.replicas_for(R.MAX_SAMPLE * 1000, 1e-9)
    assert isinstance(n, int) and n <= 2 * 10**9


def _peak_bytes(text: str) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        R.parse_metrics_text(text, "m", R.SIGNAL_ENGINE)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _one_line_of_words(size: int) -> str:
    """One line the filter keeps (its first word is the queue metric's name) with ``size`` bytes of words after it:
    _read_lines splits the whole line at every blank to find its first word."""
    return f"{Q} " + "a " * (size // 2) + "\n"


# Fixed (was a strict xfail): MEDIUM (the operator's memory, every namespace): the line filter meant to bound what the
# parser holds allocates ~16x a body itself for one long line (_read_lines' line.split() of the whole line to find its
# first word: ~2M strings for a 4 MiB line): 64 MB here against 18 MB for the 10,000 ordinary lines the cap allows,
# and parses run in parallel threads (asyncio.to_thread, up to min(32, CPUs + 4) at once): 8 such pods reach the 512Mi
# limit
def test_what_parsing_a_pods_metrics_holds_is_bounded_by_the_line_cap_not_the_body():
    cap = 4 * 2**20  # sources.MAX_METRICS_BYTES: the most of a body the scraper reads
    at_the_cap = _peak_bytes(_ordinary(cap))  # 10,000 ordinary lines kept, the rest dropped: what the cap allows
    peak = _peak_bytes(_one_line_of_words(cap))
    assert peak <= 2 * at_the_cap, f"{peak / 2**20:.0f} MiB for one line; 10,000 ordinary lines: {at_the_cap / 2**20:.0f} MiB"


# Fixed (was a strict xfail): HIGH (the operator's memory, every namespace): the 10,000 lines the cap keeps may all be
# distinct request-time buckets (le within 0..1e6), and every sample keeps them (TritonCounters.request_buckets): ~1.1
# MB a sample, and the scraper keeps 720 samples a pod (syncPeriodSeconds: 1, the CRD's minimum, fills them in 12
# minutes): ~800 MB for ONE pod, past the operator's 512Mi limit; after the OOM kill the ring refills and it is killed
# again
def test_what_one_sample_of_a_pod_keeps_is_bounded_like_a_real_histogram():
    import tracemalloc

    m = '{model="m"'
    lines = [f"{Q}{m}}} 1", f"{C}{m}}} 1", f'{R._BUCKET_SAMPLE}{m},le="+Inf"}} 1']
    lines += [f'{R._BUCKET_SAMPLE}{m},le="{i / 10:g}"}} {i}' for i in range(R.MAX_METRIC_LINES - 3)]
    body = "\n".join(lines) + "\n"
    assert len(body) < 2**20  # well within the 4 MiB the scraper reads
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = R.parse_metrics_text(body, "m", R.SIGNAL_ENGINE)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # the reading stays (queue and compute); a histogram of more bounds than MAX_BUCKETS is no histogram
    assert kept is not None and kept.request_buckets is None
    samples_per_pod = 720  # sources.TritonScraper's max_samples_per_pod
    # a real pod's histogram has tens of buckets (a few KB a sample); 64 KiB x 720 samples = 45 MiB for one pod
    assert held <= 64 * 2**10, (f"{len(kept.request_buckets)} buckets, {held / 2**20:.1f} MiB a sample, "
                                f"{held * samples_per_pod / 2**20:.0f} MiB for one pod's {samples_per_pod} samples")


# Fixed (was a strict xfail): HIGH (the event loop, every namespace): window_ratio runs on the event loop (_evaluate:
# scaler.reading()) and walks every sample's buckets: with 10,000 distinct bounds a pod, 72 samples took 0.35 s of CPU
# here, the 720 a pod keeps (syncPeriodSeconds 1, windowSeconds 3600) ~3.5 s a pod each sync, twice with panic mode:
# the loop that serves every namespace's reconciles stalls, and past LOOP_STALL_S (60 s: ~17 such pods) live() fails
def test_a_window_of_one_pods_samples_is_read_in_milliseconds_whatever_its_histogram():
    m = '{model="m"'

    def body(k: int) -> str:
        lines = [f"{Q}{m}}} {k}", f"{C}{m}}} {k}", f'{R._BUCKET_SAMPLE}{m},le="+Inf"}} {k * 10_000}']
        lines += [f'{R._BUCKET_SAMPLE}{m},le="{i / 10:g}"}} {i * k}' for i in range(R.MAX_METRIC_LINES - 3)]
        return "\n".join(lines) + "\n"

    counters = [R.parse_metrics_text(body(k), "m", R.SIGNAL_ENGINE) for k in (1, 2)]
    samples = {"p": [(float(t), counters[t % 2]) for t in range(72)]}  # a tenth of the ring a pod may fill
    cost = quiet_cpu_s(lambda: R.window_ratio(samples, 72.0, 3600.0, R.SIGNAL_ENGINE))
    assert cost <= 0.05, f"{cost:.2f}s of CPU on the event loop for 72 samples of one pod"


def _bound_pod(name: str, node: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


# Fixed (was a strict xfail): LOW-MEDIUM (another namespace's replicas): pool_nodes is empty when the pool has no node
# (a nodeSelector that matches nothing; nodes cordoned, relabelled or removed), and _elsewhere then counts every bound
# pod: all backends of a GPU product whose pools are empty share one key (the digest of no names) with 0 GPUs, so a
# tenant with a PriorityClass that points its nodeSelector at nothing while its old pods run in another pool drains
# another namespace's backend whose nodes left its pool, for pods of neither pool
def test_pods_bound_elsewhere_hold_nothing_in_a_pool_of_no_nodes():
    from llmbackend.autoscaling.holding import bound_replicas
    from llmbackend.autoscaling.pool import Claim, share

    empty = frozenset()  # decide.py: AutoscaleTarget.pool_nodes of a pool with no node
    attacker_pods = [_bound_pod(f"a-{i}", "gpu-node-in-pool-p1") for i in range(2)]
    victim_pods = [_bound_pod(f"b-{i}", "gpu-node-in-pool-p2") for i in range(3)]
    pool = ("H100/e3b0c44298fc1c14",)  # product_pool's key for no nodes: the digest of ""
    unplaceable = "no node of the pool can hold a serving pod: 0/0 nodes are available"
    attacker = Claim("tenant", "a", pool, 0, 1000, 2, 2, 0, 1, cluster_wide=True, class_priority=1000,
                     held=bound_replicas(2, attacker_pods, empty), unplaceable=unplaceable)
    victim = Claim("other", "b", pool, 0, 0, 3, 3, 1, 1, held=bound_replicas(3, victim_pods, empty),
                   unplaceable=unplaceable)
    shares, _ = share([attacker, victim], 1000.0, across_namespaces=False)
    assert shares[victim.key].replicas == 3, shares[victim.key]
