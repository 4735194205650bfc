"""Events as client-go's recorder sends them (k8s.io/client-go/tools/record/events_cache.go, EventCorrelator, at
client-go v0.36): a repeat of an event is counted on the object already posted (one PATCH of count and
lastTimestamp, no new Event object); after AGGREGATE_MAX events of the same reason on one object within
AGGREGATE_INTERVAL_S that differ only in their message, later ones are posted as one "(combined from similar events)"
event that is then counted; and a token bucket per involved object (SPAM_BURST, refilled at SPAM_QPS) drops what goes
beyond, so a backend that fails in a loop cannot flood the namespace's events. Pure: the caller sends what it answers.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# client-go's defaults (events_cache.go: maxLruCacheEntries, defaultAggregateMaxEvents,
# defaultAggregateIntervalInSeconds, defaultSpamBurst, defaultSpamQPS).
MAX_CACHED = 4096
AGGREGATE_MAX = 10
AGGREGATE_INTERVAL_S = 600.0
SPAM_BURST = 25
SPAM_QPS = 1 / 300
COMBINED_PREFIX = "(combined from similar events): "


@dataclass
class _Posted:
    name: str | None  # the Event object's name, once the create's answer said it
    count: int


@dataclass
class _Similar:
    messages: set[str]
    since: float


@dataclass
class _Bucket:
    tokens: float
    at: float


class _Lru(OrderedDict):
    def remember(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > MAX_CACHED:
            self.popitem(last=False)


@dataclass(frozen=True)
class Send:
    """What to send: a new Event (`create`), or `patch` for the Event named `name` that was posted before."""

    create: dict[str, Any] | None = None
    name: str | None = None
    patch: dict[str, Any] | None = None


def _object_key(event: dict[str, Any]) -> tuple[Any, ...]:
    """Whose budget an event spends: the involved object's, per reporting component."""
    return event["involvedObject"].get("uid"), event["source"].get("component")


def _similar_key(event: dict[str, Any]) -> tuple[Any, ...]:
    """Events that differ only in their message (combined after AGGREGATE_MAX)."""
    return (*_object_key(event), event["type"], event["reason"])


def _posted_key(event: dict[str, Any]) -> tuple[Any, ...]:
    """The Event a repeat counts on: its own message's, or the combined one of its similar events."""
    message = event["message"]
    return (*_similar_key(event), COMBINED_PREFIX if message.startswith(COMBINED_PREFIX) else message)


class EventCorrelator:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._posted = _Lru()
        self._similar = _Lru()
        self._buckets = _Lru()

    def correlate(self, event: dict[str, Any]) -> Send | None:
        """What to send for `event` (a core/v1 Event with count 1), or None when the object's budget is spent."""
        now = self._clock()
        with self._lock:
            if not self._allowed(_object_key(event), now):
                return None
            similar_key = _similar_key(event)
            similar = self._similar.get(similar_key)
            if similar is None or now - similar.since > AGGREGATE_INTERVAL_S:
                similar = _Similar(set(), now)
            similar.messages.add(event["message"])
            self._similar.remember(similar_key, similar)
            if len(similar.messages) >= AGGREGATE_MAX:  # every later similar event counts on the combined one
                event = {**event, "message": COMBINED_PREFIX + event["message"]}
            key = _posted_key(event)
            posted = self._posted.get(key)
            if posted is None or posted.name is None:
                self._posted.remember(key, _Posted(None, 1))
                return Send(create=event)
            posted.count += 1
            self._posted.remember(key, posted)
            return Send(name=posted.name, patch={"count": posted.count, "lastTimestamp": event["lastTimestamp"],
                                                 "message": event["message"]})

    def posted(self, event: dict[str, Any], created: dict[str, Any]) -> None:
        """The create for `event` (as correlate returned it) was answered with `created`: repeats count on it."""
        with self._lock:
            self._posted.remember(_posted_key(event), _Posted(created["metadata"]["name"], int(created.get("count") or 1)))

    def forget(self, event: dict[str, Any]) -> None:
        """The Event posted for this one is gone (404 on its patch, e.g. expired after the API server's TTL)."""
        similar_key = _similar_key(event)
        with self._lock:
            for key in [k for k in self._posted if k[:len(similar_key)] == similar_key]:
                self._posted.pop(key, None)

    def _allowed(self, key: tuple[Any, ...], now: float) -> bool:
        bucket = self._buckets.get(key) or _Bucket(SPAM_BURST, now)
        bucket.tokens = min(SPAM_BURST, bucket.tokens + (now - bucket.at) * SPAM_QPS)
        bucket.at = now
        self._buckets.remember(key, bucket)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True
