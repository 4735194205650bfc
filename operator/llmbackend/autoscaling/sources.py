"""Where readings come from: Triton's /metrics of each pod, or Prometheus.

Both sources return a :class:`RatioReading`; errors become readings with
``ratio=None`` and a reason, they never raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..api import engine_metrics as EM
from ..render.hpa import default_query
from . import http_get
from .ratio import (
    REASON_NO_DATA,
    REASON_PROMETHEUS_ERROR,
    REASON_STALE,
    SIGNAL_ENGINE,
    SIGNAL_PROMETHEUS,
    MetricsReader,
    RatioReading,
    TritonCounters,
    window_ratio,
)

DEFAULT_METRICS_PORT = 8002


@dataclass
class PodScrapeState:
    samples: deque = field(default_factory=lambda: deque(maxlen=720))  # (t, TritonCounters)
    last_error: str | None = None
    last_error_time: float | None = None
    errors: int = 0
    last_ok_time: float | None = None


# The most of one pod's /metrics the operator reads. A Triton pod serving one LLM exports some tens of KiB (its
# histograms included; docs/autoscaling.md has the figures): the cap bounds the CPU a hostile image can make the
# operator spend on one scrape. Memory does not grow with it: the body is read as it arrives (MetricsReader).
MAX_METRICS_BYTES = 1 * 2**20
# The most reads of the socket per scrape of one pod: its whole answer (status line, headers, chunk framing and body;
# http_get counts each). The event loop's work per read (a recv, a wake-up, our parsing) is what a byte cap does not
# bound: a pod that sends one byte per TCP segment would cost a read per byte until the timeout cuts it. An honest
# answer arrives in few large reads (a Triton pod's tens of KiB in a handful; even 1 MiB at a 1448-byte MSS in ~725),
# so past this the scrape is abandoned as failed.
MAX_READS_PER_SCRAPE = 1024
# Scrapes in flight in the whole operator (every backend's), each holding at most a chunk and a line of its body,
# and of one namespace's backends together: a tenant's slow pods hold at most a quarter of the slots, so another
# namespace's scrapes do not queue behind them. Waiting for a slot counts in the scrape's own timeout.
MAX_SCRAPES_IN_FLIGHT = 64


class _Slots:
    """The process-wide bound on scrapes in flight, and each namespace's part of it."""

    def __init__(self) -> None:
        self.all = asyncio.Semaphore(MAX_SCRAPES_IN_FLIGHT)
        self.namespaces: dict[str, tuple[asyncio.Semaphore, int]] = {}  # namespace -> (its slots, scrapes using them)

    @contextlib.asynccontextmanager
    async def hold(self, namespace: str) -> AsyncIterator[None]:
        own, users = self.namespaces.get(namespace) or (asyncio.Semaphore(max(1, MAX_SCRAPES_IN_FLIGHT // 4)), 0)
        self.namespaces[namespace] = (own, users + 1)
        try:
            async with own, self.all:  # its namespace's slot first: one waiting for it holds none of the others'
                yield
        finally:
            own, users = self.namespaces[namespace]
            if users > 1:
                self.namespaces[namespace] = (own, users - 1)
            else:
                del self.namespaces[namespace]  # names are the admin's, but none is kept longer than its scrapes


_scrape_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Slots] = weakref.WeakKeyDictionary()


def _slots() -> _Slots:
    """The scrape slots of this event loop (tests run several)."""
    loop = asyncio.get_running_loop()
    slots = _scrape_slots.get(loop)
    if slots is None:
        slots = _scrape_slots[loop] = _Slots()
    return slots


class TritonScraper:
    """Scrapes ``http://{ip}:{port}/metrics`` of each ready pod and keeps a ring of samples per pod.

    One scraper per backend. Call :meth:`scrape` every sync period with the
    backend's ready pods (``{pod_name: ip}`` or ``{pod_name: "ip:port"}``), then
    :meth:`reading` for a window; :meth:`poll` does both. Pods no longer listed
    are forgotten. Per-pod failures (timeout, refused, HTTP error, garbage,
    model absent) are recorded in :attr:`pods` and counted in the return value
    of :meth:`scrape`; nothing raises.

    ``model``: Triton model whose queue/compute to measure (``tensorrt_llm``,
    the served vLLM model ...); None sums all models. ``signal``: ``engine``
    (the serving model's engine counters; every LLM backend) or ``triton``
    (Triton's own; non-decoupled, non-LLM models only).
    """

    def __init__(
        self,
        model: str | None,
        *,
        signal: str = SIGNAL_ENGINE,
        port: int = DEFAULT_METRICS_PORT,
        timeout_s: float = 2.0,
        concurrency: int = 16,
        retention_s: float = 3600.0,
        max_samples_per_pod: int = 720,
        clock: Callable[[], float] = time.time,
        namespace: str = "",
    ) -> None:
        self.model = model
        self.namespace = namespace  # whose part of the operator's scrape slots this backend's scrapes take
        self.signal = signal
        self.port = port
        self.timeout_s = timeout_s
        self.retention_s = retention_s
        self.max_samples = max_samples_per_pod
        self.clock = clock
        self.pods: dict[str, PodScrapeState] = {}
        self._sem = asyncio.Semaphore(concurrency)
        self._in_flight: set[str] = set()  # pods whose scrape has not ended

    async def close(self) -> None:
        """Nothing to release: each scrape opens and closes its own connection (kept for the callers' ``async with``
        and the autoscaler's close of a backend's sources)."""

    async def __aenter__(self) -> TritonScraper:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def url_for(self, address: str) -> str:
        return metrics_url(address, self.port)

    async def _fetch(self, pod: str, address: str) -> tuple[str, TritonCounters | None, str | None, float]:
        url = self.url_for(address)
        if pod in self._in_flight:
            # its last scrape has not ended (a round cut short by the evaluation's timeout is cancelled, so this is
            # rare): never two of one pod at once; this round counts it as failed, its samples stay
            return pod, None, f"the previous scrape of {url} has not finished", self.clock()
        self._in_flight.add(pod)
        try:
            async with asyncio.timeout(self.timeout_s), self._sem, _slots().hold(self.namespace):
                return await self._read(pod, address, url)  # a scrape that cannot start in time fails as a slow one
        except TimeoutError:
            return pod, None, f"timeout after {self.timeout_s:g}s: {url}", self.clock()
        except http_get.HttpGetError as e:
            return pod, None, f"{e} from {url}", self.clock()
        except Exception as e:  # noqa: BLE001 - a pod's failure must not fail the scrape
            return pod, None, f"{type(e).__name__}: {e} ({url})", self.clock()
        finally:
            self._in_flight.discard(pod)

    async def _read(self, pod: str, address: str, url: str) -> tuple[str, TritonCounters | None, str | None, float]:
        """One pod's /metrics, read as it arrives: each chunk is parsed on the event loop (bounded work, no thread:
        a timeout or a cancellation stops the read and the parse at once) and only the sums are kept."""
        # The pod runs the tenant's image: its answer is read with bounded work (http_get: every read of the socket
        # counted, every byte capped, a redirect never followed), never whole.
        reader = MetricsReader(self.model, self.signal)
        await http_get.get(*metrics_address(address, self.port), "/metrics", reader.feed,
                           max_body=MAX_METRICS_BYTES, max_reads=MAX_READS_PER_SCRAPE)
        reader.finish()
        t = self.clock()
        c = reader.result()
        if c is None:
            if self.signal == SIGNAL_ENGINE:
                return pod, None, (f"no engine counters ({EM.ENGINE_QUEUE_METRIC}) for model {self.model!r} at {url}: "
                                   "the serving model must export them (the operator's rendered model does)"), t
            return pod, None, f"no Triton queue/compute counters for model {self.model!r} at {url}", t
        return pod, c, None, t

    async def scrape(self, pods: Mapping[str, str]) -> int:
        """Scrape every listed pod concurrently; returns the number of failed pods."""
        for gone in set(self.pods) - set(pods):
            del self.pods[gone]
        if not pods:
            return 0
        results = await asyncio.gather(*(self._fetch(p, a) for p, a in pods.items()))
        failed = 0
        for pod, counters, err, t in results:
            st = self.pods.setdefault(pod, PodScrapeState(samples=deque(maxlen=self.max_samples)))
            if err is not None:
                failed += 1
                st.errors += 1
                st.last_error, st.last_error_time = err, t
                continue
            st.samples.append((t, counters))
            st.last_ok_time = t
            while st.samples and st.samples[0][0] < t - self.retention_s:
                st.samples.popleft()
        return failed

    def samples_by_pod(self) -> dict[str, list[tuple[float, TritonCounters]]]:
        return {p: list(st.samples) for p, st in self.pods.items()}

    def errors(self) -> dict[str, str]:
        return {p: st.last_error for p, st in self.pods.items() if st.last_error}

    def reading(self, window_s: float, now: float | None = None) -> RatioReading:
        r = window_ratio(self.samples_by_pod(), self.clock() if now is None else now, window_s, self.signal)
        if r.pods_used == 0 and not r.pods_stale and not r.pods_warming and self.errors():
            # Every pod failed: say why (e.g. no engine counters) instead of "no samples".
            pod, err = sorted(self.errors().items())[0]
            return RatioReading(None, r.reason, f"{r.message}; {pod}: {err}", pods_used=0, signal=self.signal)
        return r

    def in_flight_by_pod(self) -> dict[str, float]:
        """Requests inside each pod's engine at its newest sample (batch + engine queue), for drain ordering."""
        out: dict[str, float] = {}
        for pod, st in self.pods.items():
            if st.samples:
                c = st.samples[-1][1]
                if c.pending is not None:
                    out[pod] = c.pending
        return out

    async def poll(self, pods: Mapping[str, str], window_s: float) -> RatioReading:
        await self.scrape(pods)
        return self.reading(window_s)


def metrics_address(address: str, port: int) -> tuple[str, int]:
    """The host and port of a pod's metrics: ``ip:port`` as given, else ``port`` on the IP (IPv4 or bare IPv6)."""
    if address.count(":") == 1:  # ip:port
        host, _, given = address.partition(":")
        return host, int(given)
    if address.startswith("[") and "]:" in address:  # [ipv6]:port
        host, _, given = address[1:].partition("]:")
        return host, int(given)
    return address.strip("[]"), port


def metrics_url(address: str, port: int) -> str:
    """The /metrics URL of a pod (for messages: the scrape connects to :func:`metrics_address`)."""
    host, port = metrics_address(address, port)
    return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"


def parse_scalar(data: Mapping[str, Any]) -> float | None:
    """Sum of an instant query's vector (or its scalar); None when empty or malformed; NaN/Inf ignored."""
    try:
        if data.get("resultType") == "scalar":
            values = [float(data["result"][1])]
        else:
            values = [float(s["value"][1]) for s in data.get("result") or []]
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    values = [v for v in values if not (math.isnan(v) or math.isinf(v))]
    return sum(values) if values else None


def pod_regex_for(names: list[str] | None = None, prefix: str | None = None) -> str:
    """A ``pod=~`` regex: exact pod names, or ``<prefix>-.*`` (StatefulSet pods are ``<name>-<ordinal>``)."""
    if names:
        return "|".join(re.escape(n) for n in sorted(names))
    if prefix:
        return re.escape(prefix) + "-[0-9]+.*"
    return ".+"


class PrometheusRatioSource:
    """Reads the ratio from Prometheus' instant query API (``<url>/api/v1/query``).

    The query is always :func:`default_query`: the recording rule's per-pod series of the backend's own pods,
    averaged here (``pods_used`` is the number of series). The operator writes it; a tenant's PromQL is never run
    (docs/security.md).

    A sample older than ``max_age_s`` (Prometheus returns the last value within
    its 5 min lookback) makes the reading ``Stale``.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        max_age_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self.clock = clock
        self._session = session
        self._own_session = session is None
        self.last_error: str | None = None

    async def close(self) -> None:
        if self._own_session and self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> PrometheusRatioSource:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def query_for(self, namespace: str, pod_regex: str) -> str:
        return default_query(namespace, pod_regex)

    async def _query(self, q: str) -> dict[str, Any]:
        assert self._session is not None
        async with self._session.get(
            f"{self.url}/api/v1/query", params={"query": q},
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
        ) as resp:
            body = await resp.json(content_type=None)
            if resp.status != 200 or not isinstance(body, dict) or body.get("status") != "success":
                err = body.get("error") if isinstance(body, dict) else None
                raise RuntimeError(f"HTTP {resp.status}: {err or body!r}"[:500])
            return body.get("data") or {}

    async def reading(self, namespace: str, pod_regex: str) -> RatioReading:
        """Query the ratio and, alongside, ``timestamp(<query>)`` (when each series'
        sample was written, e.g. the rule evaluation): instant queries stamp results
        with the query time, so only the latter shows a stalled rule or scrape."""
        q = self.query_for(namespace, pod_regex)
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._own_session = True
        data: dict[str, Any] | BaseException
        ts: dict[str, Any] | BaseException
        data, ts = await asyncio.gather(self._query(q), self._query(f"timestamp({q})"), return_exceptions=True)
        if isinstance(data, BaseException):
            e = data
            self.last_error = f"timeout after {self.timeout_s:g}s" if isinstance(e, asyncio.TimeoutError) else f"{type(e).__name__}: {e}"
            return RatioReading(None, REASON_PROMETHEUS_ERROR, self.last_error, pods_used=None)
        self.last_error = None
        sample_times: list[float] | None = None
        if isinstance(ts, dict) and ts.get("resultType") == "vector":
            try:
                sample_times = [float(s["value"][1]) for s in ts.get("result") or []]
            except (KeyError, TypeError, ValueError, IndexError):
                sample_times = None
        return self.parse_result(data, sample_times=sample_times)

    async def waiting(self, query: str) -> float | None:
        """The activation query's value (requests waiting for a backend with no replica); None on any error.
        `query`: the admin's named template, filled in by the operator (egress.Settings.activation_query)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._own_session = True
        try:
            return parse_scalar(await self._query(query))
        except Exception as e:  # noqa: BLE001 - no activation signal is "nothing waiting", never a crash
            self.last_error = f"{type(e).__name__}: {e}"
            return None

    def parse_result(self, data: Mapping[str, Any], sample_times: list[float] | None = None) -> RatioReading:
        now = self.clock()
        rtype = data.get("resultType")
        result = data.get("result")
        points: list[tuple[float, float]] = []
        try:
            if rtype == "vector":
                for s in result or []:
                    t, v = s["value"]
                    points.append((float(t), float(v)))
            elif rtype == "scalar" and result:
                t, v = result
                points.append((float(t), float(v)))
            else:
                return RatioReading(None, REASON_NO_DATA, f"unexpected result type {rtype!r}", pods_used=None)
        except (KeyError, TypeError, ValueError) as e:
            return RatioReading(None, REASON_PROMETHEUS_ERROR, f"malformed result: {e}", pods_used=None)
        points = [(t, v) for t, v in points if not (math.isnan(v) or math.isinf(v))]
        if not points:
            return RatioReading(None, REASON_NO_DATA, "query returned no series", pods_used=0)
        newest = max(sample_times) if sample_times else max(t for t, _ in points)
        if now - newest > self.max_age_s:
            return RatioReading(None, REASON_STALE, f"newest sample is {now - newest:.0f}s old", pods_used=None, timestamp=newest)
        ratio = max(0.0, sum(v for _, v in points) / len(points))
        return RatioReading(
            ratio, "Ok", f"queue/compute {ratio:.3f} from Prometheus ({len(points)} series)",
            pods_used=len(points), timestamp=newest, signal=SIGNAL_PROMETHEUS,
        )
