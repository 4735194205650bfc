"""Fail fast before the server starts: is the model directory a usable Hugging Face checkpoint for this sharding?

Shipped by the llmbackend operator in the backend's ConfigMap and run as an init container in the serving image
(Python standard library only, nothing downloaded). Checks:
- the directory exists and holds config.json (valid JSON);
- weights: *.safetensors (every shard a model.safetensors.index.json names exists) or pytorch_model*.bin;
- tokenizer files: tokenizer.json, tokenizer.model or tokenizer_config.json with a vocabulary;
- the parallelism fits the model's dimensions read from config.json: TP divides the attention heads and shares
  or replicates the KV heads evenly, PP is at most the number of layers, EP divides TP and the experts.
On a problem it writes one message naming the path and the fix to the termination log (the pod's
status.containerStatuses[].state.terminated.message) and to stderr, and exits 1; otherwise it prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


def _text_config(config: dict) -> dict:
    """Multimodal checkpoints nest the language model's shape under text_config."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) and "num_attention_heads" in inner else config


def _first(config: dict, *keys: str):
    for key in keys:
        if isinstance(config.get(key), int):
            return config[key]
    return None


def check(model_dir: str, tp: int, pp: int, ep: int | None) -> tuple[list[str], str]:
    """(problems, summary). Each problem says what is wrong and what to do."""
    if not os.path.isdir(model_dir):
        return [f"{model_dir} is not a directory: point model.source at the checkpoint's directory"], ""
    names = set(os.listdir(model_dir))
    problems: list[str] = []
    config: dict = {}
    if "config.json" not in names:
        problems.append("no config.json: this is not a Hugging Face checkpoint directory "
                        "(model.source.pvc.path must name the directory that holds config.json)")
    else:
        try:
            with open(os.path.join(model_dir, "config.json")) as f:
                config = json.load(f)
        except (OSError, ValueError) as exc:
            problems.append(f"config.json cannot be read: {exc}")

    safetensors = sorted(n for n in names if n.endswith(".safetensors"))
    index = "model.safetensors.index.json"
    if index in names:
        try:
            with open(os.path.join(model_dir, index)) as f:
                shards = sorted(set((json.load(f).get("weight_map") or {}).values()))
            missing = [s for s in shards if s not in names]
            if missing:
                problems.append(f"{index} names {len(missing)} missing shard(s), e.g. {missing[0]}: "
                                "copy the complete checkpoint")
            elif not shards:
                problems.append(f"{index} has an empty weight_map: copy the complete checkpoint")
        except (OSError, ValueError) as exc:
            problems.append(f"{index} cannot be read: {exc}")
    elif not safetensors and not any(n.startswith("pytorch_model") and n.endswith(".bin") for n in names):
        problems.append("no weights (*.safetensors, model.safetensors.index.json or pytorch_model*.bin): "
                        "copy the checkpoint's weight files")

    if not (names & set(TOKENIZER_FILES)) and not ("tokenizer_config.json" in names
                                                    and names & {"vocab.json", "vocab.txt", "spiece.model"}):
        problems.append("no tokenizer files (tokenizer.json, tokenizer.model, or tokenizer_config.json with a "
                        "vocabulary): copy them from the model's repository")

    summary = ""
    if config:
        text = _text_config(config)
        heads = _first(text, "num_attention_heads", "n_head")
        kv_heads = _first(text, "num_key_value_heads", "num_kv_heads") or heads
        layers = _first(text, "num_hidden_layers", "n_layer", "num_layers")
        experts = _first(text, "num_local_experts", "n_routed_experts", "num_experts")
        if heads is not None and heads % tp:
            problems.append(f"tensor parallelism {tp} does not divide the {heads} attention heads: choose a TP "
                            f"that divides {heads} (parallelism.tensorParallel)")
        if kv_heads and tp % kv_heads and kv_heads % tp:
            problems.append(f"tensor parallelism {tp} can neither split nor evenly replicate the {kv_heads} KV heads: "
                            f"choose a TP that divides or is a multiple of {kv_heads}")
        if layers is not None and pp > layers:
            problems.append(f"pipeline parallelism {pp} exceeds the {layers} layers: lower parallelism.pipelineParallel")
        if ep is not None and ep > 1:
            if tp % ep:
                problems.append(f"expert parallelism {ep} must divide tensor parallelism {tp} "
                                "(parallelism.expertParallel)")
            if experts is None:
                problems.append(f"expert parallelism {ep} is set but config.json declares no experts: "
                                "leave parallelism.expertParallel empty for a dense model")
            elif experts % ep:
                problems.append(f"expert parallelism {ep} does not divide the {experts} experts")
        summary = (f"{config.get('model_type', '?')}: {layers} layers, {heads} heads, {kv_heads} KV heads"
                   + (f", {experts} experts" if experts else "") + f"; TP={tp} PP={pp}" + (f" EP={ep}" if ep else ""))
    return problems, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--pp", type=int, required=True)
    parser.add_argument("--ep", type=int)
    parser.add_argument("--source", default="", help="where the directory comes from, for the message")
    parser.add_argument("--termination-log", default="/dev/termination-log")
    args = parser.parse_args(argv)
    problems, summary = check(args.model_dir, args.tp, args.pp, args.ep)
    if not problems:
        print(f"checkpoint OK at {args.model_dir}: {summary}")
        return 0
    where = f"{args.model_dir}" + (f" ({args.source})" if args.source else "")
    message = f"checkpoint check failed for {where}:\n" + "\n".join(f"- {p}" for p in problems)
    print(message, file=sys.stderr)
    try:
        with open(args.termination_log, "w") as f:
            f.write(message[:4000])  # the kubelet keeps at most 4096 bytes
    except OSError:
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main())
