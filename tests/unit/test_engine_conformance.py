"""Conformance of the serving models, the rendered engine arguments and the CPU stand-ins with the real engines at
the pinned versions (llmbackend.api.engine_versions), read from their source, never imported.

The API surfaces live in tests/unit/engine_api/<package>.json, written by dev/engine_api/extract_api.py from the
engines' source (vLLM: the PyPI wheel; TensorRT-LLM: see the file's "source" field). A check fails when a model calls
an engine function with a keyword it does not take, imports a name the package lacks, reads a stats attribute that
does not exist, or when model.yaml/model.json carries an argument the engine rejects; and when a stand-in offers a
name or a parameter the real package lacks (a test against the stand-in would then pass for code that fails on a
GPU)."""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from test_samples import CHECKPOINTS  # the fixture checkpoints of hf:// samples (offline)

from llmbackend.api.engine_versions import TENSORRT_LLM_VERSION, VLLM_VERSION
from llmbackend.cli import main
from llmbackend.render import triton, vllm_backend

ROOT = Path(__file__).resolve().parents[2]
SURFACES = Path(__file__).with_name("engine_api")
STANDINS = ROOT / "dev" / "standins"
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
NODES = ROOT / "e2e" / "topologies" / "dgx-h100-x4.yaml"
GOLDEN = Path(__file__).with_name("golden") / "triton"

sys.path.insert(0, str(ROOT / "dev" / "engine_api"))
import extract_api  # noqa: E402


def surface(package: str) -> dict[str, Any]:
    return json.loads((SURFACES / f"{package}.json").read_text())


def _cls(s: dict[str, Any], key: str) -> dict[str, Any]:
    return s["classes"][key]


def _names(s: dict[str, Any], key: str) -> set[str]:
    c = _cls(s, key)
    return set(c["fields"]) | set(c["attributes"]) | set(c["methods"])


def _params(s: dict[str, Any], key: str, method: str) -> set[str] | None:
    """A method's keyword names, or None when it takes **kwargs (any keyword)."""
    m = _cls(s, key)["methods"][method]
    return None if m["var_keyword"] else set(m["params"])


# callee name in a model's source -> what its keywords must be, per engine
def trtllm_rules(s: dict[str, Any]) -> dict[str, set[str] | None]:
    llm = "tensorrt_llm.llmapi.llm:LLM"
    return {
        "LLM": set(_cls(s, "tensorrt_llm.llmapi.llm_args:TorchLlmArgs")["fields"]),
        "SamplingParams": set(_cls(s, "tensorrt_llm.sampling_params:SamplingParams")["fields"]),
        "KvCacheConfig": set(_cls(s, "tensorrt_llm.llmapi.llm_args:KvCacheConfig")["fields"]),
        "generate_async": _params(s, llm, "generate_async"),
        "get_stats_async": _params(s, llm, "get_stats_async"),
        "abort": _params(s, "tensorrt_llm.executor.result:GenerationResult", "abort"),
        "LoRARequest": set(_cls(s, "tensorrt_llm.executor.request:LoRARequest")["fields"]),
    }


def vllm_rules(s: dict[str, Any]) -> dict[str, set[str] | None]:
    llm = "vllm.v1.engine.async_llm:AsyncLLM"
    return {
        "AsyncEngineArgs": set(_cls(s, "vllm.engine.arg_utils:AsyncEngineArgs")["fields"]),
        "SamplingParams": set(_cls(s, "vllm.sampling_params:SamplingParams")["fields"]),
        "from_engine_args": _params(s, llm, "from_engine_args"),
        "generate": _params(s, llm, "generate"),
        "abort": _params(s, llm, "abort"),
        "LoRARequest": set(_cls(s, "vllm.lora.request:LoRARequest")["fields"]),
    }


def call_problems(source: str, rules: dict[str, set[str] | None]) -> list[str]:
    """Keywords passed to an engine callable that it does not take."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        allowed = rules.get(name or "")
        if name not in rules or allowed is None:
            continue
        for kw in node.keywords:
            if kw.arg is not None and kw.arg not in allowed:
                problems.append(f"line {node.lineno}: {name}() takes no keyword {kw.arg!r}")
    return problems


def import_problems(source: str, s: dict[str, Any]) -> list[str]:
    """`from <engine module> import X` where the module does not export X (or the class does not exist there)."""
    problems = []
    package = s["package"]
    classes = {key.split(":")[0]: set() for key in s["classes"]}
    for key in s["classes"]:
        classes[key.split(":")[0]].add(key.split(":")[1])
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            known = set(s["exports"].get(node.module, [])) | classes.get(node.module, set())
            if node.module not in s["exports"] and node.module not in classes:
                problems.append(f"line {node.lineno}: module {node.module} is not in the checked surface")
                continue
            problems += [f"line {node.lineno}: {node.module} has no {a.name!r}" for a in node.names
                         if a.name not in known]
    return problems


def config_problems(args: dict[str, Any], fields: set[str], where: str) -> list[str]:
    return [f"{where}: unknown argument {k!r}" for k in sorted(args) if k not in fields]


def llm_yaml_problems(doc: dict[str, Any], s: dict[str, Any]) -> list[str]:
    args = {k: v for k, v in doc.items() if k != "triton_config"}
    problems = config_problems(args, set(_cls(s, "tensorrt_llm.llmapi.llm_args:TorchLlmArgs")["fields"]), "LLM()")
    nested = {"kv_cache_config": "tensorrt_llm.llmapi.llm_args:KvCacheConfig",
              "lora_config": "tensorrt_llm.lora_helper:LoraConfig",
              "scheduler_config": "tensorrt_llm.llmapi.llm_args:SchedulerConfig",
              "cuda_graph_config": "tensorrt_llm.llmapi.llm_args:CudaGraphConfig"}
    for key, cls in nested.items():
        if isinstance(args.get(key), dict):
            problems += config_problems(args[key], set(_cls(s, cls)["fields"]), key)
    return problems


# ---- the pinned versions ----

def test_surfaces_are_the_pinned_versions() -> None:
    assert surface("tensorrt_llm")["version"] == TENSORRT_LLM_VERSION
    assert surface("vllm")["version"] == VLLM_VERSION
    assert surface("vllm")["generated_by"] == "dev/engine_api/extract_api.py"


# ---- the serving models ----

@pytest.mark.parametrize("package, source, rules", [
    ("tensorrt_llm", triton.llmapi_model_source, trtllm_rules),
    ("vllm", vllm_backend.model_source, vllm_rules),
])
def test_models_call_the_engines_with_names_they_take(package, source, rules) -> None:
    s = surface(package)
    text = source()
    assert call_problems(text, rules(s)) == []
    assert import_problems(text, s) == []


def test_a_misspelt_keyword_in_a_model_fails_the_check() -> None:
    s = surface("tensorrt_llm")
    text = triton.llmapi_model_source()
    assert "streaming=req[" in text
    problems = call_problems(text.replace("streaming=req[", "streamng=req["), trtllm_rules(s))
    assert len(problems) == 1 and "generate_async() takes no keyword 'streamng'" in problems[0]
    vtext = vllm_backend.model_source().replace("stat_loggers=", "stat_logger=")
    assert any("'stat_logger'" in p for p in call_problems(vtext, vllm_rules(surface("vllm"))))
    assert import_problems("from tensorrt_llm.llmapi import KvCacheConfg\n", s) == [
        "line 1: tensorrt_llm.llmapi has no 'KvCacheConfg'"]


@pytest.fixture
def models(monkeypatch):
    """Both model files loaded as Triton loads them, over the stand-ins (to call their pure request parsing)."""
    monkeypatch.syspath_prepend(str(STANDINS))
    import pb_utils_standin

    pb_utils = pb_utils_standin.install(sys.modules)
    loaded = {}
    for name, source in (("trtllm", triton.llmapi_model_source()), ("vllm", vllm_backend.model_source())):
        spec = importlib.util.spec_from_loader(f"conformance_{name}", loader=None)
        module = importlib.util.module_from_spec(spec)
        exec(compile(source, f"{name}_model.py", "exec"), module.__dict__)  # noqa: S102 - our own shipped file
        loaded[name] = module
    yield loaded, pb_utils
    for name in [m for m in sys.modules if m == "triton_python_backend_utils" or m.split(".")[0] in ("vllm",)]:
        sys.modules.pop(name, None)


def _every_input(pb_utils) -> dict[str, Any]:
    values = {"text_input": b"hello there", "max_tokens": 4, "temperature": 0.5, "top_p": 0.9, "top_k": 3, "seed": 1,
              "frequency_penalty": 0.1, "presence_penalty": 0.1, "repetition_penalty": 1.1, "stream": True,
              "exclude_input_in_output": True, "return_num_input_tokens": True, "return_num_output_tokens": True,
              "num_return_sequences": 2, "num_logprobs": 3, "skip_special_tokens": False}
    tensors = {k: pb_utils.Tensor(k, np.array([v], dtype=np.object_ if isinstance(v, bytes) else None))
               for k, v in values.items()}
    tensors["stop_words"] = pb_utils.Tensor("stop_words", np.array([b"x"], dtype=np.object_))
    return tensors


def test_sampling_arguments_built_from_every_input_are_engine_fields(models) -> None:
    loaded, pb_utils = models
    trt = loaded["trtllm"].parse_request(pb_utils.InferenceRequest(_every_input(pb_utils)))["sampling"]
    assert config_problems(trt, set(_cls(surface("tensorrt_llm"), "tensorrt_llm.sampling_params:SamplingParams")[
        "fields"]), "tensorrt_llm.SamplingParams") == []
    request = pb_utils.InferenceRequest(_every_input(pb_utils))
    vkw = loaded["vllm"].parse_request(request)[1]
    assert config_problems(vkw, set(_cls(surface("vllm"), "vllm.sampling_params:SamplingParams")["fields"]),
                           "vllm.SamplingParams") == []
    assert {"max_tokens", "stop", "top_k", "n", "logprobs"} <= set(trt) & set(vkw), "every input was parsed"


@pytest.mark.parametrize("guide_type, guide", [("json", None), ("json_schema", '{"type": "object"}')])
def test_guides_are_the_engines_guided_decoding_fields(models, guide_type, guide) -> None:
    """The guided_decoding_* inputs become GuidedDecodingParams / StructuredOutputsParams arguments each engine has."""
    loaded, _ = models
    trt = loaded["trtllm"].parse_guide(guide_type, guide)
    assert trt and config_problems(trt, set(_cls(surface("tensorrt_llm"), "tensorrt_llm.sampling_params:"
                                                 "GuidedDecodingParams")["fields"]), "GuidedDecodingParams") == []
    vllm = loaded["vllm"].parse_guide(guide_type.encode(), None if guide is None else guide.encode())
    assert vllm == trt and config_problems(vllm, set(_cls(surface("vllm"), "vllm.sampling_params:"
                                                          "StructuredOutputsParams")["fields"]), "SO") == []
    with pytest.raises(ValueError, match="guided decoding: guide type 'regex' is not served"):
        loaded["trtllm"].parse_guide("regex", "a+")


# What the vLLM model's stat logger reads: (class, attribute). Each must exist upstream, and the model must still
# read it (so this table follows the model).
VLLM_ATTRIBUTES = [
    ("vllm.v1.metrics.stats:SchedulerStats", "num_waiting_reqs"),
    ("vllm.v1.metrics.stats:SchedulerStats", "num_running_reqs"),
    ("vllm.v1.metrics.stats:SchedulerStats", "kv_cache_usage"),
    ("vllm.v1.metrics.stats:SchedulerStats", "num_skipped_waiting_reqs"),
    ("vllm.v1.engine.async_llm:AsyncLLM", "check_health"),
    ("vllm.v1.engine.async_llm:AsyncLLM", "errored"),
    ("vllm.v1.metrics.stats:IterationStats", "finished_requests"),
    ("vllm.v1.metrics.stats:FinishedRequestStats", "queued_time"),
    ("vllm.v1.metrics.stats:FinishedRequestStats", "inference_time"),
    ("vllm.config.vllm:VllmConfig", "cache_config"),
    ("vllm.config.vllm:VllmConfig", "scheduler_config"),
    ("vllm.config.cache:CacheConfig", "num_gpu_blocks"),
    ("vllm.config.scheduler:SchedulerConfig", "max_num_seqs"),
    ("vllm.outputs:RequestOutput", "outputs"),
    ("vllm.outputs:RequestOutput", "finished"),
    ("vllm.outputs:RequestOutput", "prompt_token_ids"),
    ("vllm.outputs:CompletionOutput", "text"),
    ("vllm.outputs:CompletionOutput", "token_ids"),
    ("vllm.outputs:CompletionOutput", "finish_reason"),
    ("vllm.outputs:CompletionOutput", "index"),
    ("vllm.outputs:CompletionOutput", "logprobs"),
    ("vllm.logprobs:Logprob", "logprob"),
    ("vllm.logprobs:Logprob", "rank"),
    ("vllm.logprobs:Logprob", "decoded_token"),
]


@pytest.mark.parametrize("cls, attribute", VLLM_ATTRIBUTES)
def test_vllm_model_reads_attributes_vllm_has(cls, attribute) -> None:
    assert attribute in _names(surface("vllm"), cls)
    assert attribute in vllm_backend.model_source()


def test_vllm_stat_logger_record_takes_what_vllm_passes() -> None:
    upstream = _cls(surface("vllm"), "vllm.v1.metrics.loggers:StatLoggerBase")["methods"]["record"]["params"]
    tree = ast.parse(vllm_backend.model_source())
    record = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "record")
    ours = [a.arg for a in record.args.args][1:]
    assert ours == upstream[: len(ours)] and record.args.vararg and record.args.kwarg, (ours, upstream)


# ---- the rendered engine arguments ----

def _rendered_files(tmp_path: Path, capsys) -> list[Path]:
    files = list(GOLDEN.glob("*/*/1/model.yaml")) + list(GOLDEN.glob("*/*/1/model.json"))
    for sample in SAMPLES:
        out = tmp_path / sample.stem
        checkpoint = ["--checkpoint", str(CHECKPOINTS[sample.name])] if sample.name in CHECKPOINTS else []
        assert main(["render", "-f", str(sample), "--nodes", str(NODES), "-o", str(out), *checkpoint]) == 0
        capsys.readouterr()
        files += list(out.glob("model-repository/**/model.yaml")) + list(out.glob("model-repository/**/model.json"))
    return files


def test_rendered_engine_arguments_are_ones_the_engines_take(tmp_path, capsys) -> None:
    files = _rendered_files(tmp_path, capsys)
    assert any(f.name == "model.yaml" for f in files) and any(f.name == "model.json" for f in files)
    trt, vllm = surface("tensorrt_llm"), surface("vllm")
    engine_args = set(_cls(vllm, "vllm.engine.arg_utils:AsyncEngineArgs")["fields"])
    problems = []
    for f in files:
        if f.name == "model.yaml":
            problems += [f"{f}: {p}" for p in llm_yaml_problems(yaml.safe_load(f.read_text()), trt)]
        else:
            problems += [f"{f}: {p}" for p in config_problems(json.loads(f.read_text()), engine_args, "AsyncEngineArgs")]
    assert problems == []


def test_a_misspelt_argument_in_model_yaml_fails_the_check() -> None:
    trt = surface("tensorrt_llm")
    assert llm_yaml_problems({"model": "/m", "max_batch_sizee": 8, "kv_cache_config": {"free_gpu_mem_fraction": 0.9},
                              "cuda_graph_config": {"padding_enabled": True},
                              "triton_config": {"decoupled": True}}, trt) == [
        "LLM(): unknown argument 'max_batch_sizee'", "kv_cache_config: unknown argument 'free_gpu_mem_fraction'",
        "cuda_graph_config: unknown argument 'padding_enabled'"]


# ---- the stand-ins ----

def _standin(module: str, name: str) -> dict[str, Any]:
    src = extract_api.Source(STANDINS)
    found = extract_api._find_class(src, module, name)
    assert found is not None, f"stand-in {module}:{name} not found"
    return extract_api._class_surface(src, found[0], found[1], set())


STANDIN_CLASSES = [
    # (stand-in module:class, upstream package, upstream module:class)
    ("tensorrt_llm:SamplingParams", "tensorrt_llm", "tensorrt_llm.sampling_params:SamplingParams"),
    ("tensorrt_llm:GuidedDecodingParams", "tensorrt_llm", "tensorrt_llm.sampling_params:GuidedDecodingParams"),
    ("tensorrt_llm:KvCacheConfig", "tensorrt_llm", "tensorrt_llm.llmapi.llm_args:KvCacheConfig"),
    ("tensorrt_llm:CudaGraphConfig", "tensorrt_llm", "tensorrt_llm.llmapi.llm_args:CudaGraphConfig"),
    ("tensorrt_llm:CompletionOutput", "tensorrt_llm", "tensorrt_llm.executor.result:CompletionOutput"),
    ("tensorrt_llm:IterationResult", "tensorrt_llm", "tensorrt_llm.executor.result:IterationResult"),
    ("tensorrt_llm:LLM", "tensorrt_llm", "tensorrt_llm.llmapi.llm:LLM"),
    ("tensorrt_llm.executor.request:LoRARequest", "tensorrt_llm", "tensorrt_llm.executor.request:LoRARequest"),
    ("vllm.lora.request:LoRARequest", "vllm", "vllm.lora.request:LoRARequest"),
    ("vllm.engine.arg_utils:AsyncEngineArgs", "vllm", "vllm.engine.arg_utils:AsyncEngineArgs"),
    ("vllm.sampling_params:SamplingParams", "vllm", "vllm.sampling_params:SamplingParams"),
    ("vllm.sampling_params:StructuredOutputsParams", "vllm", "vllm.sampling_params:StructuredOutputsParams"),
    ("vllm.outputs:RequestOutput", "vllm", "vllm.outputs:RequestOutput"),
    ("vllm.outputs:CompletionOutput", "vllm", "vllm.outputs:CompletionOutput"),
    ("vllm.logprobs:Logprob", "vllm", "vllm.logprobs:Logprob"),
    ("vllm.v1.engine.async_llm:AsyncLLM", "vllm", "vllm.v1.engine.async_llm:AsyncLLM"),
    ("vllm.v1.metrics.loggers:StatLoggerBase", "vllm", "vllm.v1.metrics.loggers:StatLoggerBase"),
    ("vllm.v1.metrics.stats:SchedulerStats", "vllm", "vllm.v1.metrics.stats:SchedulerStats"),
    ("vllm.v1.metrics.stats:IterationStats", "vllm", "vllm.v1.metrics.stats:IterationStats"),
    ("vllm.v1.metrics.stats:FinishedRequestStats", "vllm", "vllm.v1.metrics.stats:FinishedRequestStats"),
    ("vllm.config:VllmConfig", "vllm", "vllm.config.vllm:VllmConfig"),
    ("vllm.config:CacheConfig", "vllm", "vllm.config.cache:CacheConfig"),
    ("vllm.config:SchedulerConfig", "vllm", "vllm.config.scheduler:SchedulerConfig"),
    ("vllm.exceptions:VLLMValidationError", "vllm", "vllm.exceptions:VLLMValidationError"),
    ("vllm.exceptions:VLLMClientError", "vllm", "vllm.exceptions:VLLMClientError"),
    ("vllm.v1.engine.exceptions:EngineDeadError", "vllm", "vllm.v1.engine.exceptions:EngineDeadError"),
]


@pytest.mark.parametrize("standin, package, upstream", STANDIN_CLASSES, ids=[c[0] for c in STANDIN_CLASSES])
def test_standins_offer_only_names_the_real_package_has(standin, package, upstream) -> None:
    ours = _standin(*standin.split(":"))
    real = _cls(surface(package), upstream)
    real_names = set(real["fields"]) | set(real["attributes"]) | set(real["methods"])
    extra = sorted(n for n in set(ours["fields"]) | set(ours["attributes"]) | set(ours["methods"])
                   if n not in real_names and n not in ("__init__", "__post_init__"))
    assert extra == [], f"{standin} has names {package} {upstream} lacks"
    for method, sig in ours["methods"].items():
        if method in real["methods"] and not real["methods"][method]["var_keyword"]:
            unknown = sorted(set(sig["params"]) - set(real["methods"][method]["params"]))
            assert unknown == [], f"{standin}.{method} takes {unknown}, upstream does not"


def test_standin_llm_accepts_only_torch_llm_args() -> None:
    tree = ast.parse((STANDINS / "tensorrt_llm" / "__init__.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "_LLM_ARGS")
    accepted = {e.value for e in node.value.elts}
    fields = set(_cls(surface("tensorrt_llm"), "tensorrt_llm.llmapi.llm_args:TorchLlmArgs")["fields"])
    assert sorted(accepted - fields) == []


VLLM_SOURCE = Path.home() / ".cache" / "llmbackend" / "src" / f"vllm-{VLLM_VERSION}"


@pytest.mark.skipif(not (VLLM_SOURCE / "vllm" / "__init__.py").is_file(),
                    reason=f"vLLM {VLLM_VERSION}'s source is not unpacked under {VLLM_SOURCE} (docs/engines.md says how)")
def test_the_committed_vllm_surface_is_what_the_extractor_reads_from_the_wheel() -> None:
    committed = surface("vllm")
    fresh = extract_api.extract("vllm", VLLM_SOURCE, VLLM_VERSION, committed["source"])
    assert fresh == committed


def test_lora_engine_arguments_are_ones_the_engines_take() -> None:
    from llmbackend.api.v1alpha1 import LLMBackendSpec

    doc = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"}},
           "adapters": [{"name": "sql", "source": {"uri": "hf://acme/sql-lora"}}],
           "engine": {"lora": {"maxRank": 32, "maxLoras": 2, "maxCpuLoras": 6}}}
    trt_args = triton.llmapi_args(LLMBackendSpec.model_validate(doc), 1, 1)
    assert trt_args["lora_config"]["max_lora_rank"] == 32 and trt_args["lora_config"]["max_cpu_loras"] == 6
    assert llm_yaml_problems(trt_args, surface("tensorrt_llm")) == []
    assert llm_yaml_problems({**trt_args, "lora_config": {"max_lora_rnk": 8}}, surface("tensorrt_llm")) == [
        "lora_config: unknown argument 'max_lora_rnk'"]
    vllm_args = triton.vllm_engine_args(LLMBackendSpec.model_validate(
        {**doc, "engine": {**doc["engine"], "backend": "vllm"}}), 1, 1)
    assert (vllm_args["enable_lora"], vllm_args["max_lora_rank"], vllm_args["max_loras"], vllm_args["max_cpu_loras"]) \
        == (True, 32, 2, 6)
    fields = set(_cls(surface("vllm"), "vllm.engine.arg_utils:AsyncEngineArgs")["fields"])
    assert config_problems(vllm_args, fields, "AsyncEngineArgs") == []
    plain = triton.llmapi_args(LLMBackendSpec.model_validate({"model": doc["model"]}), 1, 1)
    assert "lora_config" not in plain
