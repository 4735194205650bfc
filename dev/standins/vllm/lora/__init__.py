"""`vllm.lora` of the CPU stand-in: only request.LoRARequest (what the serving model imports)."""
