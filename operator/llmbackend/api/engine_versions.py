"""The engine versions the pinned Triton release ships: the one place they are set.

The serving models (render/models/), the CPU stand-ins (dev/standins/) and the API-surface files the conformance
check reads (tests/unit/engine_api/) all follow these versions; tests/unit/test_engine_conformance.py fails when a
name one of them uses is missing from the real package at that version. Sources: Triton's release compatibility
matrix (triton-inference-server/server docs/introduction/compatibility.md) and docs/engines.md.
"""

from __future__ import annotations

from .v1alpha1 import TRITON_RELEASE

# tritonserver:<TRITON_RELEASE>-trtllm-python-py3. The matrix lists 1.2.1 for 26.04 through 26.07 (the newest rows
# it has); 26.10 is assumed to carry the same until NVIDIA lists it.
TENSORRT_LLM_VERSION = "1.2.1"
TENSORRT_LLM_TAG = f"v{TENSORRT_LLM_VERSION}"
# tritonserver:<TRITON_RELEASE>-vllm-python-py3. The matrix stops at 26.08 (0.27.1); NVIDIA's vLLM container 26.10
# ships 0.31.0, which is what this project targets for 26.10.
VLLM_VERSION = "0.31.0"

ENGINE_VERSIONS = {"triton": TRITON_RELEASE, "tensorrt_llm": TENSORRT_LLM_VERSION, "vllm": VLLM_VERSION}
