"""CPU stand-in for the subset of vLLM 0.31.0's public API the operator's Triton model uses (tests only).

Not vLLM: no model, no GPU. It keeps vLLM's documented names and shapes (AsyncEngineArgs, SamplingParams,
RequestOutput/CompletionOutput, AsyncLLM.generate/abort, StatLoggerBase, SchedulerStats, IterationStats) and
simulates in-flight batching: `max_num_seqs` slots, one token per running request per engine step, requests beyond
the slots wait FIFO. Knobs (environment): VLLM_STANDIN_STEP_S, seconds per engine step (default 0.01).
"""

from .engine.arg_utils import AsyncEngineArgs
from .outputs import CompletionOutput, RequestOutput
from .sampling_params import RequestOutputKind, SamplingParams

__version__ = "0.31.0"
STANDIN = True

__all__ = ["AsyncEngineArgs", "CompletionOutput", "RequestOutput", "RequestOutputKind", "SamplingParams"]
