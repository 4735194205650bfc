"""`tensorrt_llm.executor.request.LoRARequest` of the CPU stand-in (tensorrt_llm/executor/request.py, 1.2.1): a
dataclass of lora_name, lora_int_id and lora_path whose construction fails when the path does not exist."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(slots=True)
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""

    def __post_init__(self) -> None:
        # upstream: ValueError when lora_path is set and does not exist
        if self.lora_path is not None and not os.path.exists(self.lora_path):
            raise ValueError(f"lora_path ({self.lora_path}) does not exist.")

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path
