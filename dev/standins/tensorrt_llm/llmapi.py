"""`tensorrt_llm.llmapi` of the CPU stand-in: the same classes as the package root (as in TensorRT-LLM 1.2)."""

from . import LLM, KvCacheConfig, RequestOutput, SamplingParams

__all__ = ["LLM", "KvCacheConfig", "RequestOutput", "SamplingParams"]
