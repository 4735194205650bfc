"""`tensorrt_llm.executor` of the CPU stand-in: only what the serving model imports (request.LoRARequest)."""
