"""`kubectl llmb`: the kubectl plugin (the `kubectl-llmb` entry point; kubectl runs any kubectl-<name> on PATH).

`kubectl llmb get [NAME] [-n NS | -A]` lists LLMBackends with what a user needs next: whether each serves, why not
(the reason and message of the first condition that is not as it should be), and the OpenAI endpoint and model
name to query. Every other subcommand is the `llmbackend` command's (`kubectl llmb presets`, `kubectl llmb plan`, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from .api.v1alpha1 import GROUP, PLURAL, VERSION
from .cli import build_parser
from .cli import main as llmbackend_main
from .controller.conditions import summarize


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl llmb get", description="list LLMBackends: serving or why not, "
                                     "and where to send OpenAI requests")
    parser.add_argument("name", nargs="?")
    parser.add_argument("-n", "--namespace")
    parser.add_argument("-A", "--all-namespaces", action="store_true")
    parser.add_argument("-o", "--output", choices=["table", "yaml", "json"], default="table")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    return parser


def _client(kubeconfig: str | None, context: str | None) -> tuple[Any, str]:
    """The API client and the namespace of the kubeconfig's context (kubectl's default namespace)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    if context:
        active = next((c for c in contexts if c["name"] == context), active)
    namespace = (active or {}).get("context", {}).get("namespace") or "default"
    return client.CustomObjectsApi(client.ApiClient(configuration)), namespace


def summary(obj: dict[str, Any]) -> dict[str, str]:
    """One row of `kubectl llmb get` for an LLMBackend (pure: tested without a cluster). STATUS, REASON and MESSAGE
    follow the one progress-vs-failure rule (controller/conditions.summarize, as status.phase and health.lua)."""
    status = obj.get("status") or {}
    conditions = status.get("conditions") or []
    state = summarize(conditions)
    endpoint = status.get("endpoint") or {}
    openai = ""
    if endpoint.get("service") and endpoint.get("openaiPort"):
        openai = f"http://{endpoint['service']}:{endpoint['openaiPort']}/v1"  # service: <name>.<namespace>.svc
    generation = obj["metadata"].get("generation")
    stale = any(c.get("observedGeneration") not in (None, generation) for c in conditions)
    return {
        "NAMESPACE": obj["metadata"]["namespace"],
        "NAME": obj["metadata"]["name"],
        "STATUS": (state.phase + (" (stale)" if stale else "")) if conditions else "Unknown",
        # status.ready, as `kubectl get llmb`'s READY column prints it (0/<wanted> before the workload exists).
        "READY": status.get("ready") or f"{status.get('readyReplicas', 0) or 0}/{status.get('replicas', 0) or 0}",
        "MODEL": status.get("modelName") or "",
        "OPENAI": openai,
        "REASON": state.reason if conditions else "",
        "MESSAGE": state.message if conditions and state.phase != "Ready" else "",
    }


def table(rows: list[dict[str, str]], all_namespaces: bool) -> str:
    if not rows:
        return "No LLMBackends found."
    columns = [c for c in rows[0] if all_namespaces or c != "NAMESPACE"]
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns[:-1]}
    lines = ["   ".join(c.ljust(widths.get(c, 0)) for c in columns).rstrip()]
    lines += ["   ".join(r[c].ljust(widths.get(c, 0)) for c in columns).rstrip() for r in rows]
    return "\n".join(lines)


def get(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from kubernetes.client.exceptions import ApiException

    try:
        api, default_namespace = _client(args.kubeconfig, args.context)
        namespace = None if args.all_namespaces else (args.namespace or default_namespace)
        if args.name:
            items = [api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, args.name)]
        elif namespace is None:
            items = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        else:
            items = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    except ApiException as exc:
        detail = exc.reason if exc.status != 404 else "not found (is the LLMBackend CRD installed? `helm install`)"
        print(f"error: {detail} ({exc.status})", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - kubeconfig problems: say them as kubectl would, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.output == "yaml":
        print(yaml.safe_dump_all(items, sort_keys=False), end="")
    elif args.output == "json":
        print(json.dumps(items if not args.name else items[0], indent=2))
    else:
        print(table([summary(o) for o in items], all_namespaces=args.all_namespaces))
    return 0


def usage() -> str:
    """`kubectl llmb --help`: its own `get`, then the `llmbackend` subcommands it hands everything else to."""
    parser = build_parser()
    parser.prog = "kubectl llmb"
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    names = ",".join(["get", *subcommands.choices])
    own = _parser()
    return (f"usage: kubectl llmb {{{names}}} ...\n\n"
            f"  get                 {own.description} (`kubectl llmb get --help`)\n\n"
            "Every other subcommand is the `llmbackend` command's:\n\n" + parser.format_help())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["get"]:
        return get(argv[1:])
    if not argv or argv[:1] in (["-h"], ["--help"], ["help"]):
        print(usage(), end="")
        return 0
    return llmbackend_main(argv)


if __name__ == "__main__":
    sys.exit(main())
