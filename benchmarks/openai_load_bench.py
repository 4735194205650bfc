"""The OpenAI endpoint under a load generator users pick: guidellm (vllm-project) sweeps it (a script that prints
figures, not a test; run by hand, not by CI).

    python benchmarks/openai_load_bench.py [--backends tensorrtllm,vllm] [--streams 1,4,16] [--seconds 20]

1. One real tritonserver serving the model repository the operator renders for an LLMBackend (the TensorRT-LLM LLM
   API model, or vLLM's, with the CPU stand-in engine from dev/standins), and in front of it the operator's OpenAI
   frontend file run as its own process with the rendered container's arguments (the pod's setup, addresses made
   local), as tests/openai does.
2. guidellm 0.8.x (`guidellm run`), installed on first use into its own venv, ~/.cache/llmbackend/guidellm-venv (it
   pulls torch and transformers; never into the project's .venv), runs a concurrency sweep (closed loop: 1, 4, 16
   streams by default, `--seconds` each) of streaming chat completions with synthetic prompts.
3. Prints per rate: requests completed / failed / incomplete, request and output-token throughput, TTFT and ITL
   p50/p90/p99, and the first error messages if any request failed. Exit status 1 when a request failed.

Offline: guidellm's synthetic prompts need a Hugging Face tokenizer (its "processor"). tests/openai/tokenizer is the
checkpoint's tokenizer_config.json only (the chat template), so the script writes a word-level tokenizer next to it
(tokenizer.json, one token per whitespace-separated word of Faker's word list, what the stand-ins count as a token):
prompt lengths guidellm asks for are then the prompt lengths the server reports. Nothing is fetched from a hub.

Output length: guidellm's synthetic `output_tokens` sends vLLM's `ignore_eos: true`, which the frontend refuses
(400, docs/openai.md); the backend's `max_tokens` (sent as `max_completion_tokens`) fixes the length instead. The
stand-ins never stop early, so every reply has exactly that many tokens. `--ignore-eos` sends it anyway.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[0:0] = [str(REPO / "operator"), str(REPO / "dev"), str(REPO / "tests" / "triton"),
                 str(REPO / "tests" / "openai")]

from llmapi_support import backend_spec, serve  # noqa: E402
from servers import frontend_files, local_args, run_frontend  # noqa: E402

from devcluster.ports import free_port  # noqa: E402

GUIDELLM_VENV = Path.home() / ".cache" / "llmbackend" / "guidellm-venv"
GUIDELLM_REQUIREMENT = "guidellm>=0.8,<0.9"
CHECKPOINT_TOKENIZER = REPO / "tests" / "openai" / "tokenizer"
MODEL = "llama-3.1-8b"  # the preset: the Triton model and the OpenAI model id

# Run with the guidellm venv's interpreter: Faker's English word list (what guidellm's synthetic prompts are made
# of: Faker's text(), sentences of those words) and the numbers and turn markers guidellm starts each prompt with
# ("<iteration> <sample> m<turn> ") as a word-level Hugging Face tokenizer, split on whitespace as the stand-ins
# count tokens. A word outside it would become <unk>, which guidellm drops when it decodes the prompt.
_WRITE_TOKENIZER = """
import sys
from faker.providers.lorem.en_US import Provider
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = {v for w in Provider.word_list for v in (w, w.capitalize(), w + ".", w.capitalize() + ".")}
words |= {str(i) for i in range(100_000)} | {f"m{i}" for i in range(100)}
vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *sorted(words)])}
tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                        eos_token="</s>").save_pretrained(sys.argv[1])
"""


def guidellm() -> Path:
    """guidellm's CLI, installed into its own venv on first use (as the Makefile does for moto's)."""
    exe = GUIDELLM_VENV / "bin" / "guidellm"
    if not exe.exists():
        print(f"installing {GUIDELLM_REQUIREMENT} into {GUIDELLM_VENV} (torch included, a few GB)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(GUIDELLM_VENV)], check=True)
        subprocess.run([str(GUIDELLM_VENV / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        GUIDELLM_REQUIREMENT], check=True)
    return exe


def write_tokenizer(into: Path) -> Path:
    """The checkpoint's tokenizer directory: its tokenizer_config.json (chat template) and a word-level vocabulary."""
    subprocess.run([str(GUIDELLM_VENV / "bin" / "python"), "-c", _WRITE_TOKENIZER, str(into)], check=True)
    config_path = into / "tokenizer_config.json"
    written = json.loads(config_path.read_text())
    checkpoint = json.loads((CHECKPOINT_TOKENIZER / "tokenizer_config.json").read_text())
    config_path.write_text(json.dumps({**written, **checkpoint}, indent=2))
    return into


@contextlib.contextmanager
def openai_endpoint(backend: str, slots: int, context: int, step_s: float, workdir: Path,
                    tokenizer: Path) -> Iterator[str]:
    """tritonserver with the rendered repository and stand-in engine, the frontend in front; yields its URL (.../v1)."""
    spec = backend_spec(slots, maxSeqLen=context, maxInputLen=context - 1, backend=backend)
    program, container_args = frontend_files(spec, workdir)
    os.environ["VLLM_STANDIN_STEP_S"] = str(step_s)  # the vLLM stand-in's decode step (tritonserver inherits it)
    with serve(spec, workdir, iteration_s=step_s) as (server, name):
        assert name == MODEL, name
        port = free_port()
        args = local_args(container_args, server.http_url, server.metrics_url, str(tokenizer), port)
        with run_frontend(program, args, port) as url:
            yield url


def scenario(url: str, tokenizer: Path, args: argparse.Namespace, report: Path) -> dict[str, Any]:
    """guidellm's scenario file: a concurrency sweep of streaming chat completions with synthetic prompts."""
    data: dict[str, Any] = {"kind": "synthetic_text", "prompt_tokens": args.prompt_tokens}
    backend: dict[str, Any] = {"kind": "openai_http", "target": url, "model": MODEL,
                               "request_format": "/v1/chat/completions", "timeout": 120}
    if args.ignore_eos:
        data["output_tokens"] = args.output_tokens  # guidellm then sends ignore_eos: true
    else:
        backend["max_tokens"] = args.output_tokens
    return {"spec": {
        "backend": backend,
        "profile": {"kind": "concurrent", "streams": [args.streams[0]]},
        "constraints": [{"kind": "max_duration", "seconds": args.seconds}],
        "data": [data],
        "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer)},
        "outputs": [{"kind": "json", "path": str(report)}],
    }, "benchmarks": [{"profile.streams": [n]} for n in args.streams]}  # one sub-benchmark per rate


def run_guidellm(url: str, tokenizer: Path, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    report = workdir / "guidellm-report.json"
    scenario_file = workdir / "guidellm-scenario.json"
    scenario_file.write_text(json.dumps(scenario(url, tokenizer, args, report), indent=2))
    # HF_HUB_OFFLINE: nothing is fetched (there is no hub here); the tokenizer is a local directory.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    cmd = [str(guidellm()), "run", "--scenario", str(scenario_file), "--disable-console-interactive"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True)
    return json.loads(report.read_text())


def summarize(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per rate of guidellm's JSON report: counts, throughput, TTFT and ITL percentiles (ms)."""
    rows = []
    for bench in report["benchmarks"]:
        m = bench["metrics"]
        ok = {name: m[name]["successful"] for name in m if isinstance(m[name], dict) and "successful" in m[name]}
        rows.append({
            "streams": bench["config"]["strategy"].get("streams"),
            "completed": m["request_totals"]["successful"],
            "failed": m["request_totals"]["errored"],
            "incomplete": m["request_totals"]["incomplete"],  # cut off when the rate's time ran out
            "req_s": ok["requests_per_second"]["mean"],
            "out_tok_s": ok["output_tokens_per_second"]["mean"],
            "prompt_tok": ok["prompt_token_count"]["mean"],
            "out_tok": ok["output_token_count"]["mean"],
            **{f"ttft_{p}": ok["time_to_first_token_ms"]["percentiles"][p] for p in ("p50", "p90", "p99")},
            **{f"itl_{p}": ok["inter_token_latency_ms"]["percentiles"][p] for p in ("p50", "p90", "p99")},
            "errors": sorted({(r["info"].get("error") or "").splitlines()[0] for r in bench["requests"]["errored"]})[:3],
        })
    return rows


def print_rows(backend: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{backend}: guidellm concurrency sweep, streaming chat completions")
    print(f"{'streams':>7} {'done':>6} {'failed':>6} {'cut':>4} {'req/s':>7} {'out tok/s':>9} {'prompt':>6} "
          f"{'out':>5} {'TTFT p50/p90/p99 ms':>21} {'ITL p50/p90/p99 ms':>20}")
    for r in rows:
        ttft = "/".join(f"{r[f'ttft_{p}']:.0f}" for p in ("p50", "p90", "p99"))
        itl = "/".join(f"{r[f'itl_{p}']:.1f}" for p in ("p50", "p90", "p99"))
        print(f"{r['streams']:>7} {r['completed']:>6} {r['failed']:>6} {r['incomplete']:>4} {r['req_s']:>7.2f} "
              f"{r['out_tok_s']:>9.1f} {r['prompt_tok']:>6.0f} {r['out_tok']:>5.0f} {ttft:>21} {itl:>20}")
        for error in r["errors"]:
            print("   failed:", error[:300])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="tensorrtllm", help="comma-separated: tensorrtllm, vllm")
    ap.add_argument("--streams", default="1,4,16", help="concurrent streams per rate (closed loop)")
    ap.add_argument("--seconds", type=float, default=20, help="load time per rate")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--step-s", type=float, default=0.02, help="the stand-in engine's decode time per iteration")
    ap.add_argument("--ignore-eos", action="store_true",
                    help="guidellm's own output length (sends ignore_eos: true, which the frontend refuses)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (scenario, report, logs)")
    args = ap.parse_args()
    args.streams = [int(s) for s in args.streams.split(",")]
    slots = max(args.streams)
    context = args.prompt_tokens * 2 + args.output_tokens + 64  # room for the chat template's words
    guidellm()
    failed = 0
    workroot = Path(tempfile.mkdtemp(prefix="openai-load-bench-"))
    try:
        tokenizer = write_tokenizer(workroot / "tokenizer")
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs, "
              f"{platform.processor() or platform.machine()}")
        for backend in args.backends.split(","):
            workdir = workroot / backend
            workdir.mkdir()
            with openai_endpoint(backend, slots, context, args.step_s, workdir, tokenizer) as url:
                report = run_guidellm(url, tokenizer, args, workdir)
            rows = summarize(report)
            print_rows(backend, rows)
            failed += sum(r["failed"] for r in rows)
    finally:
        if args.keep:
            print("work directory:", workroot)
        else:
            shutil.rmtree(workroot, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
