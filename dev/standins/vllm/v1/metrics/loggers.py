"""StatLoggerBase: vLLM's documented interface for custom stat loggers (0.31.0)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from ...config import VllmConfig
from .stats import IterationStats, SchedulerStats

StatLoggerFactory = Callable[[VllmConfig, int], "StatLoggerBase"]


class StatLoggerBase(ABC):
    @abstractmethod
    def __init__(self, vllm_config: VllmConfig, engine_index: int = 0): ...

    @abstractmethod
    def record(self, scheduler_stats: SchedulerStats | None, iteration_stats: IterationStats | None,
               mm_cache_stats=None, engine_idx: int = 0): ...

    @abstractmethod
    def log_engine_initialized(self): ...

    def log(self):  # noqa: B027 - optional hook, as upstream
        pass
