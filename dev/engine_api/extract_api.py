"""Extract the API surface the serving models rely on from an engine's Python source, without importing it.

    python dev/engine_api/extract_api.py vllm --source DIR --version 0.31.0 > tests/unit/engine_api/vllm.json
    python dev/engine_api/extract_api.py tensorrt_llm --source DIR --version 1.2.1 > tests/unit/engine_api/tensorrt_llm.json

DIR holds the package's top-level directory (`DIR/vllm/...`, `DIR/tensorrt_llm/...`): an unpacked wheel (vLLM:
`pip download --no-deps vllm==<v>`, then unzip into ~/.cache/llmbackend/src/vllm-<v>) or a checkout of the release tag
(TensorRT-LLM: `git clone --depth 1 -b v<v> https://github.com/NVIDIA/TensorRT-LLM`). The files are parsed with
`ast`; nothing of the package runs. For each target class the output lists its fields (annotated class attributes,
inherited ones included: dataclass, pydantic and msgspec fields alike), the attributes its `__init__` sets, and its
methods' parameter names; for each target module, the names it exports. tests/unit/test_engine_conformance.py checks
the serving models, the rendered model.yaml/model.json and the CPU stand-ins against these files.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

# package -> (classes "module:Class", modules whose exports are listed)
TARGETS: dict[str, tuple[list[str], list[str]]] = {
    "vllm": ([
        "vllm.engine.arg_utils:AsyncEngineArgs",
        "vllm.sampling_params:SamplingParams",
        "vllm.sampling_params:StructuredOutputsParams",
        "vllm.outputs:RequestOutput",
        "vllm.outputs:CompletionOutput",
        "vllm.logprobs:Logprob",
        "vllm.v1.engine.async_llm:AsyncLLM",
        "vllm.v1.metrics.loggers:StatLoggerBase",
        "vllm.v1.metrics.stats:SchedulerStats",
        "vllm.v1.metrics.stats:IterationStats",
        "vllm.v1.metrics.stats:FinishedRequestStats",
        "vllm.config.vllm:VllmConfig",
        "vllm.config.cache:CacheConfig",
        "vllm.config.scheduler:SchedulerConfig",
        "vllm.exceptions:VLLMValidationError",
        "vllm.exceptions:VLLMClientError",
        "vllm.v1.engine.exceptions:EngineDeadError",
        "vllm.lora.request:LoRARequest",
    ], ["vllm"]),
    "tensorrt_llm": ([
        "tensorrt_llm.llmapi.llm_args:TorchLlmArgs",
        "tensorrt_llm.llmapi.llm_args:KvCacheConfig",
        "tensorrt_llm.llmapi.llm_args:SchedulerConfig",
        "tensorrt_llm.llmapi.llm_args:CudaGraphConfig",
        "tensorrt_llm.sampling_params:SamplingParams",
        "tensorrt_llm.sampling_params:GuidedDecodingParams",
        "tensorrt_llm.llmapi.llm:LLM",
        "tensorrt_llm.executor.result:GenerationResult",
        "tensorrt_llm.executor.result:IterationResult",
        "tensorrt_llm.executor.result:CompletionOutput",
        "tensorrt_llm.executor.request:LoRARequest",
        "tensorrt_llm.lora_helper:LoraConfig",
    ], ["tensorrt_llm", "tensorrt_llm.llmapi"]),
}


class Source:
    """The package's modules, parsed on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trees: dict[str, ast.Module] = {}

    def path(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self.trees:
            path = self.path(module)
            if path is None:
                return None
            self.trees[module] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        return self.trees[module]


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(src: Source, module: str) -> dict[str, tuple[str, str]]:
    """Name bound by `from X import Y [as Z]` in a module -> (X, Y)."""
    tree = src.tree(module)
    path = src.path(module)
    out: dict[str, tuple[str, str]] = {}
    if tree is None or path is None:
        return out
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            origin = _absolute(module, node, path.name == "__init__.py")
            for alias in node.names:
                out[alias.asname or alias.name] = (origin, alias.name)
    return out


def _find_class(src: Source, module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
    tree = src.tree(module)
    if tree is None or depth > 8:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    imported = _imports(src, module).get(name)
    if imported is not None:
        return _find_class(src, imported[0], imported[1], depth + 1)
    return None


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _base_name(node.value)
    return None


def _is_classvar(annotation: ast.expr) -> bool:
    return "ClassVar" in ast.unparse(annotation)


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, Any]:
    a = fn.args
    params = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    return {"params": params, "var_positional": a.vararg is not None, "var_keyword": a.kwarg is not None,
            "async": isinstance(fn, ast.AsyncFunctionDef)}


def _class_surface(src: Source, module: str, cls: ast.ClassDef, seen: set[str]) -> dict[str, Any]:
    fields: list[str] = []
    attributes: list[str] = []
    methods: dict[str, Any] = {}
    bases: list[str] = []
    for base in cls.bases:
        name = _base_name(base)
        if name is None:
            continue
        found = _find_class(src, module, name)
        if found is None:
            bases.append(name)
            continue
        key = f"{found[0]}:{found[1].name}"
        bases.append(key)
        if key in seen:
            continue
        seen.add(key)
        inherited = _class_surface(src, found[0], found[1], seen)
        fields += [f for f in inherited["fields"] if f not in fields]
        attributes += [f for f in inherited["attributes"] if f not in attributes]
        methods.update(inherited["methods"])
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and not _is_classvar(node.annotation):
            if not node.target.id.startswith("_") and node.target.id not in fields:
                fields.append(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = {_base_name(d) for d in node.decorator_list}
            if "property" in decorators or "cached_property" in decorators:
                if not node.name.startswith("_") and node.name not in attributes:
                    attributes.append(node.name)
                continue
            if node.name.startswith("_") and node.name not in ("__init__", "__aiter__", "__anext__", "__iter__",
                                                                 "__next__", "__await__"):
                continue
            methods[node.name] = _signature(node)
            if node.name == "__init__":
                for sub in ast.walk(node):
                    targets = sub.targets if isinstance(sub, ast.Assign) else (
                        [sub.target] if isinstance(sub, ast.AnnAssign) else [])
                    for t in targets:
                        if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                                and not t.attr.startswith("_") and t.attr not in attributes):
                            attributes.append(t.attr)
    return {"bases": bases, "fields": fields, "attributes": attributes, "methods": methods}


def _exports(src: Source, module: str) -> list[str]:
    tree = src.tree(module)
    if tree is None:
        return []
    names: set[str] = set(_imports(src, module))
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id in ("__all__", "MODULE_ATTRS"):
                    value = node.value
                    if isinstance(value, (ast.List, ast.Tuple)):
                        names |= {e.value for e in value.elts if isinstance(e, ast.Constant)}
                    elif isinstance(value, ast.Dict):  # lazily imported attributes (vllm/__init__.py)
                        names |= {k.value for k in value.keys if isinstance(k, ast.Constant)}
    return sorted(n for n in names if not n.startswith("_"))


def extract(package: str, root: Path, version: str, origin: str) -> dict[str, Any]:
    classes, modules = TARGETS[package]
    src = Source(root)
    out: dict[str, Any] = {"package": package, "version": version, "source": origin,
                           "generated_by": "dev/engine_api/extract_api.py", "exports": {}, "classes": {}}
    for module in modules:
        out["exports"][module] = _exports(src, module)
    for target in classes:
        module, name = target.split(":")
        found = _find_class(src, module, name)
        if found is None:
            raise SystemExit(f"{target}: not found under {root}")
        out["classes"][target] = _class_surface(src, found[0], found[1], {target})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", choices=sorted(TARGETS))
    parser.add_argument("--source", required=True, type=Path, help="directory holding the package directory")
    parser.add_argument("--version", required=True)
    parser.add_argument("--origin", default="", help="where the source came from (wheel file name, tag)")
    args = parser.parse_args(argv)
    surface = extract(args.package, args.source, args.version, args.origin or str(args.source))
    json.dump(surface, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
