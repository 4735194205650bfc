"""`vllm.lora.request.LoRARequest` of the CPU stand-in (vllm/lora/request.py, 0.31.0: a msgspec Struct upstream).
The id must be > 0 and the path non-empty, as upstream's __post_init__ checks; equal by name."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(eq=False)
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    load_inplace: bool = False

    def __post_init__(self) -> None:
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        assert self.lora_path, "lora_path cannot be empty"

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path

    def __eq__(self, value: object) -> bool:
        return isinstance(value, self.__class__) and self.lora_name == value.lora_name

    def __hash__(self) -> int:
        return hash(self.lora_name)
