"""llmbackend: a kopf operator serving LLMs on Triton Inference Server + TensorRT-LLM."""

__version__ = "0.1.0"
