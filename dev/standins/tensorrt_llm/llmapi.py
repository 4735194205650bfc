"""`tensorrt_llm.llmapi` of the CPU stand-in: the same classes as the package root (as in TensorRT-LLM 1.2)."""

from . import LLM, CudaGraphConfig, GuidedDecodingParams, KvCacheConfig, RequestOutput, SamplingParams

__all__ = ["LLM", "CudaGraphConfig", "GuidedDecodingParams", "KvCacheConfig", "RequestOutput", "SamplingParams"]
