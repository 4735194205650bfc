"""The queue-to-compute ratio, computed from cumulative counters (pure).

The ratio is ``Δ queue time / Δ compute time`` over a window: above 1, requests
wait longer than they compute. Two signals give those counters:

* ``engine`` (every LLM backend, TensorRT-LLM and vLLM alike): the counters the
  operator's serving model exports from the engine's own per-request timing
  (:mod:`llmbackend.api.engine_metrics`: queue = first scheduled - arrival,
  compute = last token - first scheduled) and the engine's gauges (slots
  active/max, waiting, KV-cache fraction). On a decoupled LLM model Triton's own
  queue reads ~0 at any load (the model hands each request to the engine at once),
  so only these counters see the wait.
* ``triton``: Triton's ``nv_inference_queue_duration_us`` /
  ``nv_inference_compute_infer_duration_us`` (meaningful only for non-decoupled,
  non-LLM models). NVIDIA's autoscaling guide records it per pod as::

    rate(nv_inference_queue_duration_us[1m]) / clamp_min(rate(nv_inference_compute_infer_duration_us[1m]), 1)

Here the operator computes it itself from ``/metrics`` (Prometheus text, µs) or
from the statistics API (``/v2/models/<m>/stats``, ns).

Aggregation across pods (``window_ratio``): the deltas are *summed* over pods
and divided once, i.e. a compute-weighted average of the per-pod ratios. It is
invariant to duplicating a pod's counters, and idle/warming pods (no compute)
do not drag the average to 0. The decision layer scales this per-replica
average by the number of pods that contributed (``RatioReading.pods_used``),
like the HPA's ``AverageValue`` on ready pods.

The same window gives the p99 of a request's time in the engine, from the histogram the serving models export
(``EM.ENGINE_REQUEST_SECONDS_METRIC``): bucket deltas summed over the pods used, then Prometheus'
``histogram_quantile`` (:func:`histogram_quantile`). Optional: without the histogram (older images, Triton's or
Prometheus' signal) ``RatioReading.request_p99_s`` is None and nothing else changes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import engine_metrics as EM

QUEUE_METRIC = EM.TRITON_QUEUE_METRIC
COMPUTE_METRIC = EM.TRITON_COMPUTE_METRIC
SUCCESS_METRIC = EM.TRITON_SUCCESS_METRIC
PENDING_METRIC = EM.TRITON_PENDING_METRIC
TRTLLM_REQUEST_METRIC = EM.REQUEST_GAUGE
TRTLLM_KV_METRIC = EM.KV_GAUGE

SIGNAL_ENGINE = "engine"
SIGNAL_TRITON = "triton"
SIGNAL_PROMETHEUS = "prometheus"
# Counter names per signal: (queue, compute, finished requests).
_COUNTERS = {
    SIGNAL_ENGINE: (EM.ENGINE_QUEUE_METRIC, EM.ENGINE_COMPUTE_METRIC, EM.ENGINE_REQUESTS_METRIC),
    SIGNAL_TRITON: (QUEUE_METRIC, COMPUTE_METRIC, SUCCESS_METRIC),
}

# Reasons a RatioReading carries (ratio None unless noted).
REASON_OK = "Ok"
REASON_NO_SAMPLES = "NoSamples"          # no pod has >= 2 samples in the window
REASON_NO_TRAFFIC = "NoTraffic"          # ratio 0.0: nothing queued or computed in the window
REASON_NO_COMPLETIONS = "NoCompletions"  # requests pending but none completed: cannot measure
REASON_STALE = "Stale"                   # samples exist but none is recent enough
REASON_PROMETHEUS_ERROR = "PrometheusError"
REASON_NO_DATA = "NoData"

# Fewer finished requests than this in the window: no p99 (one slow request among ten is not a p99).
P99_MIN_REQUESTS = 20
_BUCKET_SAMPLE = EM.ENGINE_REQUEST_SECONDS_METRIC + "_bucket"
# A histogram's cumulative buckets: (upper bound "le", observations <= le), ascending, the last one le=+Inf.
Buckets = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class TritonCounters:
    """Cumulative counters of one model on one server (summed over model versions).

    ``queue_us``/``compute_infer_us``/``success_count`` are monotonically
    increasing (until the server restarts): the engine's counters for signal
    ``engine``, Triton's for ``triton``. ``pending`` is a gauge (requests in the
    server: Triton's pending count, or the engine's waiting + active). The engine
    gauges (``nv_trt_llm_request_metrics``/``nv_trt_llm_kv_cache_block_metrics``)
    are present only when the serving model exports them.
    """

    queue_us: float
    compute_infer_us: float
    success_count: float
    pending: float | None = None
    trtllm_waiting: float | None = None
    kv_cache_fraction: float | None = None
    active: float | None = None      # sequences in the engine's batch
    slots: float | None = None       # the engine's max batch (request_type="max")
    request_buckets: Buckets | None = None  # the engine's request-time histogram, when exported

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class RatioReading:
    """The ratio over a window, or ``ratio=None`` with a ``reason``.

    ``ratio == 0.0`` with reason ``NoTraffic`` is a legitimate measurement (an
    idle backend wants its minimum); ``None`` means "do not scale on this".
    ``pods_used`` = pods whose deltas contributed (None when unknown, e.g. a
    custom PromQL that returns one aggregated series).
    """

    ratio: float | None
    reason: str = REASON_OK
    message: str = ""
    pods_used: int | None = 0
    pods_stale: int = 0
    pods_warming: int = 0
    timestamp: float | None = None  # time of the newest sample used
    queue_us: float = 0.0
    compute_us: float = 0.0
    requests: float = 0.0
    trtllm_waiting: float | None = None
    kv_cache_fraction: float | None = None
    signal: str = SIGNAL_TRITON
    # Engine gauges at the newest sample, summed over the pods used (None when not exported).
    active: float | None = None
    slots: float | None = None
    slots_full_pods: int = 0  # pods whose batch is full (active >= max)
    # Requests that arrived per second over the window, summed over pods: finished + growth of what is in flight
    # (conservation; exact while no pod restarts). A pod first sampled within the window counts over the longest
    # span of the pods: it turned Ready there and had no traffic before. Unlike the in-flight count it does not grow
    # with a backlog, and unlike the finished count it is not capped by capacity. None without in-flight gauges.
    arrival_rate: float | None = None
    # Little's law: Σ compute time / elapsed time = mean requests in compute, per pod
    # that contributed. With the engine's max batch size it gives the occupancy that
    # decide() uses to keep scale-downs from saturating the remaining replicas.
    mean_inflight_per_pod: float | None = None
    # p99 of a finished request's time in the engine (arrival to last token, seconds) over the window, from the
    # histogram's bucket deltas summed over the pods used; None without the histogram or with fewer than
    # P99_MIN_REQUESTS requests in it. ``request_hist_count``: the requests the histogram saw in the window.
    request_p99_s: float | None = None
    request_hist_count: float = 0.0

    @property
    def available(self) -> bool:
        return self.ratio is not None

    def formatted(self) -> str | None:
        """Status form: string with 3 decimals (AutoscalingStatus.currentRatio)."""
        return None if self.ratio is None else f"{self.ratio:.3f}"

    @property
    def compute_s_per_request(self) -> float | None:
        """Mean engine compute time of the requests that were computed, seconds. The finished counter also counts
        requests cancelled before the engine scheduled them (no compute time), which would dilute the mean while
        clients time out; the request-time histogram counts only requests with engine timing, so its count is the
        divisor when the serving model exports it."""
        if self.requests <= 0:
            return None
        timed = self.request_hist_count if 0 < self.request_hist_count <= self.requests else self.requests
        return self.compute_us / 1e6 / timed

    @property
    def offered_load(self) -> float | None:
        """Sequences the arrivals keep busy (Little's law: arrival rate x mean compute time per request)."""
        per_request = self.compute_s_per_request
        if self.arrival_rate is None or per_request is None:
            return None
        return self.arrival_rate * per_request

    @property
    def in_flight(self) -> float | None:
        """Requests inside the engines (batch + engine queue), summed over pods; None when unknown."""
        if self.active is None and self.trtllm_waiting is None:
            return None
        return (self.active or 0.0) + (self.trtllm_waiting or 0.0)


MAX_SAMPLE = 1e18  # larger than any counter a pod reaches (1e18 us of compute is 31,000 years)
MAX_BUCKET_BOUND_S = 1e6  # a request-time bucket beyond 11 days is no bucket a serving model writes
# The body is the tenant's image's: what the reader below does per line is bounded, and it holds sums, never lines.
# Lines that start with the name of a metric this module reads, looked at in one body: a serving pod writes under 200
# (7.7 KiB of /metrics, 34 of them, on the CPU stand-in engine); the rest of a body past this many is not read (a
# hostile image hides only its own later lines). It bounds the reader's Python work: 2,000 lines of 8 labels, ~17 ms.
MAX_METRIC_LINES = 2_000
# A sample line of ours is under 200 bytes; a longer one is dropped unread.
MAX_METRIC_LINE = 2048
# Labels of one sample line (ours have 2-3: model, version and one more) and the length of one label value (a model
# name is at most 253): a line past either is dropped.
MAX_LABELS = 8
MAX_LABEL_VALUE = 256
# A request-time histogram has a few dozen bounds; 10,000 distinct ones made each kept sample about 1 MiB
MAX_BUCKETS = 64
_BLANKS = b" \t"
_WANTED_LABELS = frozenset({b"model", b"le", b"request_type", b"kv_cache_block_type"})  # those a reading needs


def _labels(block: bytes, out: dict[bytes, bytes]) -> bool:
    """The labels between ``{`` and ``}`` into ``out`` (those a reading needs); False: a line to drop. With no escape
    allowed, the quotes split the block into names and values: ``a="x", b="y"`` is ``a=``, ``x``, ``, b=``, ``y``, ``""``."""
    if b"\\" in block or block.count(b'"') > 2 * MAX_LABELS:
        return False
    parts = block.split(b'"')
    if len(parts) % 2 == 0:
        return False  # a quote left open
    names: set[bytes] = set()
    for i in range(0, len(parts) - 1, 2):
        head = parts[i].strip(_BLANKS)
        if i:
            if not head.startswith(b","):
                return False  # labels are separated by commas
            head = head[1:].lstrip(_BLANKS)
        if not head.endswith(b"=") or len(parts[i + 1]) > MAX_LABEL_VALUE:
            return False
        name = head[:-1].rstrip(_BLANKS)
        if name in names:
            return False  # a label name twice: Prometheus refuses the line (and its whole scrape)
        names.add(name)
        if name in _WANTED_LABELS:
            out[name] = parts[i + 1]
    return parts[-1].strip(_BLANKS) in (b"", b",")


class MetricsReader:
    """Reads the few series this module needs from a Prometheus text exposition, fed in chunks as it arrives.

    The text is the tenant's image's, so the reader is linear and bounded. The lines that start with one of the names
    it reads are found by one search of anchored literals (a regular expression with no nested repetition: linear,
    no backtracking); every other line is passed over inside that search. A found line (at most MAX_METRIC_LINE
    bytes; at most MAX_METRIC_LINES of them a body) is read with a few C-level passes (find, split, strip): at most
    MAX_LABELS labels of at most MAX_LABEL_VALUE bytes, and only the labels the reading needs are kept. A line with
    a backslash in its labels is dropped: the series read here carry model names, versions, bucket bounds and types,
    never an escape. Between chunks it holds one partial line and the sums: memory does not grow with the body.
    """

    def __init__(self, model: str | None, signal: str = SIGNAL_TRITON) -> None:
        q_name, c_name, s_name = _COUNTERS.get(signal, _COUNTERS[SIGNAL_TRITON])
        self.engine = signal == SIGNAL_ENGINE
        self._model = None if model is None else model.encode()
        # sample name -> what it adds to
        kinds = {q_name: "queue", c_name: "compute", s_name: "success"}
        self._kind: dict[bytes, str] = {}
        for name, kind in kinds.items():
            self._kind[name.encode()] = self._kind[(name + "_total").encode()] = kind
        self._kind[_BUCKET_SAMPLE.encode()] = "bucket"
        self._kind[PENDING_METRIC.encode()] = "pending"
        self._kind[TRTLLM_REQUEST_METRIC.encode()] = "request"
        self._kind[TRTLLM_KV_METRIC.encode()] = "kv"
        # where a line of these names starts: other lines (most of a body) are passed over inside the regular
        # expression engine, not one by one in Python. Anchored literals, no nested repetition: linear in the text
        self._candidates = re.compile(b"^[ \t]*(?:" + b"|".join(re.escape(n) for n in self._kind) + b")", re.MULTILINE)
        self._partial = b""
        self._skipping = False  # inside a line longer than MAX_METRIC_LINE: dropped up to its end
        self.lines_kept = 0
        self.sums: dict[str, float] = {}
        self.kv_fraction: float | None = None
        self.buckets: dict[float, float] | None = {}  # None: more bounds than MAX_BUCKETS (no histogram)

    @property
    def full(self) -> bool:
        """MAX_METRIC_LINES lines kept: the rest of the body is not read."""
        return self.lines_kept >= MAX_METRIC_LINES

    def feed(self, chunk: bytes) -> bool:
        """Read the complete lines of ``chunk`` (with the partial line left from the last one). False once full."""
        if self.full:
            return False
        data = self._partial + chunk if self._partial else chunk
        start, end = 0, len(data)
        if self._skipping:
            newline = data.find(b"\n")
            if newline < 0:
                self._partial = b""
                return True
            self._skipping, start = False, newline + 1
        last = data.rfind(b"\n", start)
        for candidate in self._candidates.finditer(data, start, last + 1):  # complete lines that may be ours
            line_start = candidate.start()
            newline = data.find(b"\n", line_start)
            if newline - line_start <= MAX_METRIC_LINE:
                self._line(data, line_start, newline)
                if self.full:
                    self._partial = b""
                    return False
        start = max(start, last + 1)
        rest = end - start
        if rest > MAX_METRIC_LINE:
            self._partial, self._skipping = b"", True
        else:
            self._partial = data[start:] if rest else b""
        return True

    def finish(self) -> None:
        """The end of the body: its last line may lack a newline."""
        if self._partial and not self._skipping and not self.full:
            self._line(self._partial, 0, len(self._partial))
        self._partial = b""

    def _line(self, data: bytes, start: int, end: int) -> None:
        # every step below is one C-level pass over the line (find, split, strip): no Python loop over its bytes
        line = data[start:end].lstrip(_BLANKS)  # the format allows leading blanks
        if line.endswith(b"\r"):
            line = line[:-1]
        name_end = len(line)
        for stop in (b"{", b" ", b"\t"):
            at = line.find(stop)
            if 0 <= at < name_end:
                name_end = at
        self.lines_kept += 1  # a line that starts like ours counts, read or not: the Python work per body is bounded
        kind = self._kind.get(line[:name_end])
        if kind is None:
            return  # a longer name that starts with one of ours
        rest = line[name_end:].lstrip(_BLANKS)
        labels: dict[bytes, bytes] = {}
        if rest.startswith(b"{"):
            close = rest.rfind(b"}")
            if close < 0 or not _labels(rest[1:close], labels):
                return
            rest = rest[close + 1:]
        tokens = rest.replace(b"\t", b" ").split()
        if not 1 <= len(tokens) <= 2:  # the value, and a timestamp
            return
        try:
            value = float(tokens[0])
            if len(tokens) == 2:
                float(tokens[1])
        except ValueError:
            return
        # NaN, +-Inf and values no counter reaches are not readings (their sums would be infinite and reach int() in
        # the decision and the drain order). Nor is a negative value: every series read here is a counter, a count or
        # a fraction (a negative counter would read as a restart to a negative value, and a negative window)
        if not math.isfinite(value) or not 0.0 <= value <= MAX_SAMPLE:
            return
        self._add(kind, labels, value)

    def _model_matches(self, labels: Mapping[bytes, bytes]) -> bool:
        return self._model is None or labels.get(b"model") == self._model

    def _add(self, kind: str, labels: Mapping[bytes, bytes], value: float) -> None:
        sums = self.sums
        if kind in ("queue", "compute", "success"):
            if self._model_matches(labels):
                sums[kind] = sums.get(kind, 0.0) + value
        elif kind == "bucket":
            if not self.engine or not self._model_matches(labels) or self.buckets is None:
                return
            try:
                le = float(labels[b"le"])  # "+Inf" included
            except (KeyError, ValueError):
                return
            if le != math.inf and not 0.0 <= le <= MAX_BUCKET_BOUND_S:  # +-1e308 overflowed the quantile
                return
            if le not in self.buckets and len(self.buckets) >= MAX_BUCKETS:
                self.buckets = None  # more bounds than a serving model writes: no histogram
                return
            self.buckets[le] = self.buckets.get(le, 0.0) + value  # summed over model versions
        elif kind == "pending":
            if not self.engine and self._model_matches(labels):
                sums[kind] = sums.get(kind, 0.0) + value
        elif self.engine and b"model" in labels and not self._model_matches(labels):
            # Engine signal: the serving model labels its gauges with its own name. Triton signal (legacy ensemble):
            # the gauges carry the tensorrt_llm model's name: take them all.
            return
        elif kind == "request":
            request_type = labels.get(b"request_type")
            if request_type in (b"waiting", b"active", b"max"):
                sums[request_type.decode()] = sums.get(request_type.decode(), 0.0) + value
        else:  # kv
            block_type = labels.get(b"kv_cache_block_type")
            if block_type == b"fraction":
                self.kv_fraction = value if self.kv_fraction is None else max(self.kv_fraction, value)
            elif block_type in (b"used", b"max"):
                key = "kv_" + block_type.decode()
                sums[key] = sums.get(key, 0.0) + value

    def result(self) -> TritonCounters | None:
        """The counters read, or None without the queue and compute counters of the model."""
        sums = self.sums
        if "queue" not in sums or "compute" not in sums:
            return None
        kv_frac = self.kv_fraction
        if kv_frac is None and "kv_used" in sums and sums.get("kv_max"):
            kv_frac = sums["kv_used"] / sums["kv_max"]
        waiting, active = sums.get("waiting"), sums.get("active")
        pending = sums.get("pending")
        if self.engine and (waiting is not None or active is not None):
            pending = (waiting or 0.0) + (active or 0.0)
        buckets = self.buckets
        return TritonCounters(
            queue_us=sums["queue"],
            compute_infer_us=sums["compute"],
            success_count=sums.get("success", 0.0),
            pending=pending,
            trtllm_waiting=waiting,
            kv_cache_fraction=kv_frac,
            active=active,
            slots=sums.get("max"),
            request_buckets=tuple(sorted(buckets.items())) if buckets and math.inf in buckets else None,
        )


_FEED_CHARS = 64 * 1024


def parse_metrics_text(text: str, model: str | None, signal: str = SIGNAL_TRITON) -> TritonCounters | None:
    """Parse a Prometheus exposition from Triton's :8002 (all at once: the scraper feeds a :class:`MetricsReader` as
    the body arrives). ``model=None`` sums all models.

    ``signal`` picks the counters: ``engine`` (the serving model's engine counters)
    or ``triton`` (Triton's own). Returns None when the text has no such counters
    for the model (model not loaded, wrong port, no engine metrics, garbage).
    Raises nothing on garbage.
    """
    reader = MetricsReader(model, signal)
    for at in range(0, len(text), _FEED_CHARS):
        if not reader.feed(text[at:at + _FEED_CHARS].encode(errors="replace")):
            break
    reader.finish()
    return reader.result()


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative (le, count) buckets, as Prometheus' ``histogram_quantile`` computes it.

    Linear interpolation inside the bucket holding the rank ``q x total``; the lowest bucket starts at 0 (when its
    bound is positive); a rank in the +Inf bucket gives the highest finite bound (a lower bound of the truth).
    Counts that fall between buckets (a scrape torn between updates) are made monotonic first. None without a
    +Inf bucket or without observations."""
    if not 0.0 < q <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {q}")
    ordered = sorted(buckets)
    if not ordered or not math.isinf(ordered[-1][0]):
        return None
    counts: list[float] = []
    for _, c in ordered:
        counts.append(max(c, counts[-1]) if counts else max(c, 0.0))
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if i == len(ordered) - 1:
        return ordered[-2][0] if len(ordered) > 1 else None
    upper = ordered[i][0]
    if i == 0:
        if upper <= 0:
            return upper
        lower, below = 0.0, 0.0
    else:
        lower, below = ordered[i - 1][0], counts[i - 1]
    return lower + (upper - lower) * (rank - below) / (counts[i] - below)


def request_p99(buckets: Sequence[tuple[float, float]], min_requests: float = P99_MIN_REQUESTS) -> float | None:
    """p99 of the request times in ``buckets`` (window deltas), None with fewer than ``min_requests``."""
    if not buckets or max(c for _, c in buckets) < min_requests:
        return None
    p99 = histogram_quantile(0.99, buckets)
    return p99 if p99 is not None and math.isfinite(p99) else None


def bucket_delta(samples: Sequence[tuple[float, TritonCounters]]) -> dict[float, float] | None:
    """Sum of consecutive increases of one pod's histogram buckets (a restart, i.e. any bucket going down or the
    bounds changing, counts the new values, like :func:`pod_delta`). None when no two consecutive samples have it."""
    total: dict[float, float] | None = None
    for (_, a), (_, b) in zip(samples, samples[1:]):
        if a.request_buckets is None or b.request_buckets is None:
            continue
        before, after = dict(a.request_buckets), dict(b.request_buckets)
        reset = before.keys() != after.keys() or any(after[le] < before[le] for le in after)
        step = after if reset else {le: after[le] - before[le] for le in after}
        if total is not None and total.keys() != step.keys():
            total = {}  # the bounds changed (a new image): only the newest layout counts
        total = {le: (total or {}).get(le, 0.0) + n for le, n in step.items()}
    return total


def from_statistics(stats_json: Mapping[str, Any], model: str | None) -> TritonCounters | None:
    """Counters from the statistics API (``GET /v2/models[/<m>]/stats``, durations in ns).

    Sums all versions of ``model`` (all models when None). Returns None when the
    model is absent or the JSON is malformed.
    """
    try:
        entries = stats_json.get("model_stats") or []
        queue_ns = compute_ns = success = 0.0
        found = False
        for e in entries:
            if model is not None and e.get("name") != model:
                continue
            st = e.get("inference_stats") or {}
            queue_ns += float((st.get("queue") or {}).get("ns", 0))
            compute_ns += float((st.get("compute_infer") or {}).get("ns", 0))
            success += float((st.get("success") or {}).get("count", 0))
            found = True
    except (AttributeError, TypeError, ValueError):
        return None
    if not found:
        return None
    return TritonCounters(queue_us=queue_ns / 1000.0, compute_infer_us=compute_ns / 1000.0, success_count=success)


@dataclass
class _PodDelta:
    queue: float = 0.0
    compute: float = 0.0
    success: float = 0.0
    resets: int = 0


def pod_delta(samples: Sequence[tuple[float, TritonCounters]]) -> _PodDelta:
    """Sum of consecutive increases; a decrease of any counter means the server
    restarted (counters start at 0 again), so that step's increase is the new value
    (what Prometheus' rate() does)."""
    d = _PodDelta()
    for (_, a), (_, b) in zip(samples, samples[1:]):
        if (
            b.queue_us < a.queue_us
            or b.compute_infer_us < a.compute_infer_us
            or b.success_count < a.success_count
        ):
            d.resets += 1
            d.queue += b.queue_us
            d.compute += b.compute_infer_us
            d.success += b.success_count
        else:
            d.queue += b.queue_us - a.queue_us
            d.compute += b.compute_infer_us - a.compute_infer_us
            d.success += b.success_count - a.success_count
    return d


def window_ratio(
    samples_by_pod: Mapping[str, Iterable[tuple[float, TritonCounters]]],
    now: float,
    window_s: float,
    signal: str = SIGNAL_TRITON,
) -> RatioReading:
    """Aggregate Δqueue / Δcompute over the pods' samples in ``[now - window_s, now]``.

    Per pod: needs >= 2 samples in the window ("warming" otherwise); a pod whose
    newest sample is older than the window is "stale". Deltas are summed across
    pods. Outcomes:

    * no pod usable: ``ratio None``, reason ``Stale`` if every pod with samples is
      stale, else ``NoSamples``;
    * Δqueue == Δcompute == 0 and nothing pending: ``ratio 0.0``, ``NoTraffic``
      (idle is a real measurement: scale toward minReplicas);
    * nothing completed but requests pending: ``ratio None``, ``NoCompletions``
      (Triton records durations at completion; a stuck or very slow server would
      otherwise look idle);
    * else ``ratio = Δqueue / max(Δcompute, 1 µs × pods_used)`` (the guide's
      ``clamp_min(..., 1)``, per pod so that duplicated pods give the same ratio).
    """
    lo = now - window_s
    used = stale = warming = 0
    total = _PodDelta()
    newest: float | None = None
    pending_total = 0.0
    pending_seen = False
    waiting_total: float | None = None
    kv_max: float | None = None
    active_total: float | None = None
    slots_total: float | None = None
    full = 0
    inflight = 0.0
    arrivals: float | None = 0.0  # per second, pods sampled before the window began
    new_arrivals = 0.0  # requests, pods first sampled within the window (divided by the longest span below)
    longest_span = 0.0
    hist: dict[float, float] | None = None  # request-time bucket deltas summed over the pods used
    for _pod, samples in samples_by_pod.items():
        seq = sorted((s for s in samples), key=lambda x: x[0])
        if not seq:
            continue
        in_win = [s for s in seq if lo <= s[0] <= now]
        if not in_win:
            stale += 1
            continue
        if len(in_win) < 2:
            warming += 1
            continue
        d = pod_delta(in_win)
        used += 1
        total.queue += d.queue
        total.compute += d.compute
        total.success += d.success
        pod_hist = bucket_delta(in_win)
        if pod_hist is not None and (hist is None or hist.keys() == pod_hist.keys()):  # one bucket layout only
            hist = {le: (hist or {}).get(le, 0.0) + n for le, n in pod_hist.items()}
        last_t, last = in_win[-1]
        span = last_t - in_win[0][0]
        if span > 0:
            inflight += d.compute / 1e6 / span
            first = in_win[0][1]
            longest_span = max(longest_span, span)
            if arrivals is not None and first.pending is not None and last.pending is not None and not d.resets:
                n = max(0.0, d.success + last.pending - first.pending)
                if seq[0][0] < lo:
                    arrivals += n / span
                else:
                    new_arrivals += n
            else:
                arrivals = None
        newest = last_t if newest is None else max(newest, last_t)
        if last.pending is not None:
            pending_seen = True
            pending_total += last.pending
        if last.trtllm_waiting is not None:
            waiting_total = (waiting_total or 0.0) + last.trtllm_waiting
        if last.kv_cache_fraction is not None:
            kv_max = last.kv_cache_fraction if kv_max is None else max(kv_max, last.kv_cache_fraction)
        if last.active is not None:
            active_total = (active_total or 0.0) + last.active
        if last.slots is not None:
            slots_total = (slots_total or 0.0) + last.slots
            if last.slots > 0 and (last.active or 0.0) >= last.slots:
                full += 1

    common: dict[str, Any] = dict(
        pods_used=used, pods_stale=stale, pods_warming=warming, timestamp=newest,
        queue_us=total.queue, compute_us=total.compute, requests=total.success,
        trtllm_waiting=waiting_total, kv_cache_fraction=kv_max,
        mean_inflight_per_pod=(inflight / used) if used else None,
        signal=signal, active=active_total, slots=slots_total, slots_full_pods=full,
        # a pod first sampled within the window turned Ready there and received nothing before (the gateway routes
        # to Ready pods only): its short span's rate, added to the others' window rates, counted the traffic it took
        # from them twice (a replica turning Ready during a flash crowd read as 1.75x the arrivals and ordered 7
        # replicas more: autoscale_bench.py). A pod sampled before keeps its own span (a missed scrape shortens it).
        arrival_rate=(arrivals + new_arrivals / longest_span
                      if used and active_total is not None and arrivals is not None and longest_span > 0 else None),
        request_p99_s=request_p99(sorted(hist.items())) if hist else None,
        request_hist_count=hist.get(math.inf, 0.0) if hist else 0.0,
    )
    if used == 0:
        if stale and not warming:
            return RatioReading(None, REASON_STALE, f"no sample from {stale} pod(s) within the last {window_s:g}s", **common)
        return RatioReading(None, REASON_NO_SAMPLES, f"need 2 samples per pod within {window_s:g}s; {warming} pod(s) have fewer", **common)
    if total.queue == 0 and total.compute == 0:
        if pending_seen and pending_total > 0:
            return RatioReading(None, REASON_NO_COMPLETIONS, f"{pending_total:g} request(s) pending, none completed within {window_s:g}s", **common)
        return RatioReading(0.0, REASON_NO_TRAFFIC, f"no requests in the last {window_s:g}s on {used} pod(s)", **common)
    ratio = total.queue / max(total.compute, float(used))
    return RatioReading(ratio, REASON_OK, f"{signal} queue/compute {ratio:.3f} over {used} pod(s), {total.success:g} request(s)", **common)
