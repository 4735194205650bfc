"""Generate the docs that come from code: docs/troubleshooting.md (every condition reason) and docs/presets.md (the
model catalog). `make docs`; `python -m devcluster.docsgen --check` exits 1 when one is out of date
(tests/unit/test_docs.py runs the same check).

Reasons are collected from their constants, not imported: api/conditions.py (a docstring under each constant),
planning/planner.py (Planned=False), controller/modelcache.py and model_fetch.REASONS (ModelReady). A reason added
anywhere there appears after `make docs`, with its doc line; ADVICE below adds what to do for the ones it knows
(otherwise the row points at the condition's message, which always says what to do next).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from .build import REPO_ROOT

PACKAGE = REPO_ROOT / "operator" / "llmbackend"
DOCS = REPO_ROOT / "docs"
# (file, the condition its reasons go on, when the file does not say)
REASON_SOURCES = [
    ("api/conditions.py", ""),
    ("planning/planner.py", "Planned"),
    ("controller/modelcache.py", "ModelReady"),
    ("model_fetch.py", "ModelReady"),
    ("api/adapters.py", "Degraded / status.adapters"),
    ("controller/adapters.py", "Degraded / status.adapters"),
]
NOT_REASONS = {"Planned", "Available", "Progressing", "Degraded", "ModelReady"}  # condition types

ADVICE: dict[str, str] = {
    "Fits": "Nothing: the plan is in `status.plan` (`kubectl llmb get`, `llmbackend plan -o text` explains it).",
    "InvalidSpec": "Fix the fields the message names (`kubectl explain llmbackend.spec...`, docs/configuration.md).",
    "UnknownPreset": "Use a name from `llmbackend presets` (docs/presets.md), or leave `preset` out so the source's "
                     "config.json is read, or give `spec.model.architecture`.",
    "NotPlanned": "Read the Planned condition: it says why there is no plan.",
    "LeaderWorkerSetNotInstalled": "Install LeaderWorkerSet (docs/install.md), or ask for a plan that fits one "
                                   "node (fewer GPUs per replica, a quantization, a smaller model).",
    "GroupNameTaken": "Give the backend another name (delete and recreate it), or lower `spec.replicas`/"
                      "`autoscaling.maxReplicas` below the group the message names; the object named is not the "
                      "operator's to change.",
    "ResourceExists": "Rename or delete the object the message names; the operator never adopts what it did not "
                      "create.",
    "ApiRequestFailed": "Read the quoted API error: a quota, an admission webhook or RBAC (the operator's ClusterRole, "
                        "`helm upgrade` after an upgrade of the operator) refused the request.",
    "ReplicasReady": "Nothing: the backend serves (`kubectl llmb get` shows its OpenAI endpoint).",
    "ReplicasNotReady": "Wait while pods start (model load takes minutes); if it stays, `kubectl describe pod` the "
                        "backend's pods and read Degraded.",
    "ScaledToZero": "Nothing: the first request wakes it through the activator (cold start: "
                    "`status.autoscaling.coldStartSeconds`).",
    "ZeroReplicas": "Set `spec.replicas` above 0 to serve.",
    "RollingOut": "Wait; `kubectl rollout status` on the backend's Deployment or LeaderWorkerSet shows progress.",
    "RolloutComplete": "Nothing.",
    "AsExpected": "Nothing.",
    "InsufficientGPUs": "Add GPU nodes (or free GPUs), lower `spec.replicas`/`autoscaling.maxReplicas`, or plan "
                        "fewer GPUs per replica (a quantization, `parallelism.objective: throughput`).",
    "Unschedulable": "Read the scheduler's quoted message: taints without tolerations (`spec.scheduling`), node "
                     "selectors, or GPUs taken by other pods.",
    "ImagePullFailed": "Check the image name/tag (`spec.engine.image`) and the registry credentials "
                       "(imagePullSecrets).",
    "CrashLoopBackOff": "`kubectl logs --previous` on the serving pod; the checkpoint, engine options and GPU memory "
                        "are the usual causes.",
    "EngineFailed": "The pod restarts by itself; `kubectl logs --previous` on the pod has the engine's error. If it "
                    "repeats, check GPU health (Xid errors), memory (`engine.kvCacheFreeGpuMemFraction`, "
                    "`engine.vllm.gpuMemoryUtilization`) and the engine "
                    "options.",
    "CreateContainerConfigError": "Create the Secret or ConfigMap key the message names (e.g. `source.secretRef`).",
    "ProgressDeadlineExceeded": "Describe the backend's Deployment and pods: a rollout made no progress in time.",
    "ConflictingHorizontalPodAutoscaler": "Delete the other HorizontalPodAutoscaler, or use `spec.autoscaling` "
                                          "instead of your own.",
    "CheckpointInvalid": "Fix the checkpoint at the path the message names (config.json, *.safetensors, tokenizer).",
    "KEDANotInstalled": "Install KEDA, or use `autoscaling.mode: builtin` or `hpa`.",
    "ComputeDomainNotInstalled": "Install NVIDIA's DRA driver for GPUs (ComputeDomain), or plan within one node.",
    "NoGPUNodes": "No node advertises `nvidia.com/gpu`: install the GPU Operator (or device plugin) and GPU Feature "
                  "Discovery.",
    "NoSchedulableGPUNodes": "GPU nodes exist but `spec.scheduling` (nodeSelector, tolerations) rules them out, or "
                             "they are cordoned.",
    "UnknownGPUProduct": "The node's `nvidia.com/gpu.product` label is not in the planner's GPU table: pin "
                         "`spec.parallelism` or label the node with a known product.",
    "InsufficientGPUMemory": "The model does not fit the GPUs even at the widest plan: quantize (`engine.quantization`"
                             "), shorten `engine.maxSeqLen`/`maxBatchSize`, or use larger GPUs or more nodes.",
    "QuantizationUnsupported": "The GPUs cannot run this quantization (e.g. fp8 needs compute capability 8.9+): "
                               "pick another one.",
    "TensorParallelDoesNotDivideHeads": "Choose a tensor-parallel size that divides the attention heads, or leave "
                                        "`parallelism.tensorParallel` unset.",
    "TensorParallelIncompatibleWithKVHeads": "Choose a tensor-parallel size compatible with the KV heads, or leave "
                                             "it unset.",
    "TensorParallelExceedsNVLinkDomain": "Lower `parallelism.tensorParallel` to the GPUs one node (or NVLink clique)"
                                         " holds; use pipeline parallelism across nodes.",
    "PipelineParallelExceedsLayers": "Lower `parallelism.pipelineParallel` below the model's layer count.",
    "ExpertParallelInvalid": "Choose an expert-parallel size that divides the experts and the TP group, or leave it "
                             "unset.",
    "SecretNotFound": "Create the Secret `source.secretRef` names, in the backend's namespace, or fix "
                      "`source.secretRef.name`.",
    "WaitingForCheckpoint": "Wait for the download (`status.model.bytesDone`/`bytesTotal`).",
    "WaitingForOwnDownload": "Wait for the backend's own download Job (ModelReady, `status.model`); if it fails, "
                             "ModelReady and Degraded say why (e.g. a gated source needs `source.secretRef`).",
    "CheckpointArchitectureUnknown": "Give `spec.model.architecture` or a preset; the downloaded checkpoint did not "
                                     "report one.",
    "ClaimNotFound": "Create the PersistentVolumeClaim the message names in the backend's namespace, or fix the field "
                     "that names it (`source.pvc.claimName`, or a `serving.podTemplate` volume).",
    "ClaimNotBound": "A pvc source: bind the PersistentVolume with the checkpoint to `source.pvc.claimName`. An hf:// or "
                     "s3:// source: give its cache claim a StorageClass that provisions ReadWriteMany "
                     "(`source.cache.storageClassName`), or bind a volume to it.",
    "NoStorageClass": "Set `source.cache.storageClassName` to a class that provisions ReadWriteMany volumes (`kubectl get "
                      "storageclass`), or bind a ReadWriteMany PersistentVolume to the cache claim.",
    "WaitingForCacheCleanup": "Wait: a cleanup Job deletes unused copies in the cache claim first.",
    "InvalidSource": "Fix `source.uri`: `hf://org/name[@revision]` or `s3://bucket/prefix`.",
    "SourceUnauthorized": "Give a token (`source.secretRef` with HF_TOKEN, or AWS keys) that the source accepts.",
    "SourceForbidden": "The token is valid but lacks access: accept the model's license on the Hub, or grant the "
                       "S3 policy.",
    "SourceNotFound": "Check the repository/bucket and revision in `source.uri`.",
    "CheckpointConfigMissing": "Point the source at the directory that holds config.json.",
    "CheckpointLargerThanCache": "Grow the model cache claim (`source.cache.size` before it is created; resize the claim after) or free space.",
    "SourceCredentialsMissing": "Add the credentials the message names to the Secret `source.secretRef`.",
    "CacheTampered": "The cached copy was fetched again; find what wrote to the cache claim (a pod mounting it "
                     "writable other than the operator's download Job) and remove that mount.",
    "DownloadVerificationFailed": "Retried automatically; if it stays, the source changed during the download or "
                                  "the storage corrupts data.",
    "SourceUnreachable": "Check egress from the namespace to the Hub/S3 endpoint (proxy, NetworkPolicy); retried.",
    "InvalidCheckpointConfig": "Fix config.json, or give `spec.model.architecture`.",
    "UnsupportedModelType": "Give `spec.model.architecture`: the reader does not know this model_type.",
}


@dataclass
class Reason:
    name: str
    where: str
    condition: str
    doc: str


def _comment_after(lines: list[str], node: ast.AST) -> str:
    line = lines[node.lineno - 1]  # type: ignore[attr-defined]
    return line.split("#", 1)[1].strip() if "#" in line.split("=", 1)[1] else ""


def collect_reasons() -> list[Reason]:
    found: dict[str, Reason] = {}
    for rel, condition in REASON_SOURCES:
        path = PACKAGE / rel
        source = path.read_text()
        lines = source.splitlines()
        tree = ast.parse(source)
        body = tree.body
        for i, node in enumerate(body):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper():
                value = node.value.value
                if not value[:1].isupper() or not value.isalnum() or value in NOT_REASONS:
                    continue
                doc = ""
                nxt = body[i + 1] if i + 1 < len(body) else None
                if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                    doc = " ".join(nxt.value.value.split())
                doc = doc or _comment_after(lines, node)
                if (rel == "model_fetch.py" and not node.targets[0].id.startswith("REASON_")) or value in found:
                    continue
                found[value] = Reason(value, rel, condition or _condition_of(doc), doc)
            if isinstance(node, ast.Assign) and rel == "model_fetch.py" and isinstance(node.value, ast.Dict) \
                    and any(isinstance(t, ast.Name) and t.id == "REASONS" for t in node.targets):
                for v in node.value.values:
                    if isinstance(v, ast.Constant) and v.value not in found:
                        found[v.value] = Reason(v.value, "model_fetch.py (REASONS)", condition, "")
    checkpoint = PACKAGE / "api" / "checkpoint.py"
    for match in ast.walk(ast.parse(checkpoint.read_text())):  # CheckpointError subclasses carry `reason = "..."`
        if isinstance(match, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "reason" for t in match.targets) \
                and isinstance(match.value, ast.Constant) and match.value.value not in found:
            found[match.value.value] = Reason(match.value.value, "api/checkpoint.py", "ModelReady", "")
    return sorted(found.values(), key=lambda r: (REASON_SOURCES_ORDER.get(r.where.split(" ")[0], 9), r.name))


REASON_SOURCES_ORDER = {rel: i for i, (rel, _) in enumerate(REASON_SOURCES)}


def _condition_of(doc: str) -> str:
    named = [t for t in ("Planned", "Available", "Progressing", "Degraded") if doc.startswith(t)]
    return named[0] if named else "Degraded / Available"


def troubleshooting() -> str:
    reasons = collect_reasons()
    out = [
        "# Troubleshooting: every condition reason",
        "",
        "Generated by `make docs` (dev/devcluster/docsgen.py) from the reason constants in the code "
        "(api/conditions.py, planning/planner.py, controller/modelcache.py, model_fetch.py, api/checkpoint.py, api/adapters.py, controller/adapters.py); "
        "tests/unit/test_docs.py checks it is current.",
        "",
        "An LLMBackend reports four conditions on every pass (Planned, Available, Progressing, Degraded) and ModelReady"
        " for hf://, s3:// and inspected pvc sources. Start with `kubectl llmb get -n NS` (the first condition that is"
        " not as it should be, with its message) or `kubectl describe llmb NAME`; every message says what to do next."
        " The table adds what each reason means.",
        "",
        "| reason | condition | meaning | what to do |",
        "|---|---|---|---|",
    ]
    for r in reasons:
        advice = ADVICE.get(r.name, "Follow the condition's message: it says what to do next.")
        meaning = r.doc or "-"
        out.append(f"| `{r.name}` | {r.condition} | {meaning.replace('|', '/')} | {advice.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def presets() -> str:
    sys.path.insert(0, str(REPO_ROOT / "operator"))
    from llmbackend.api.presets_cli import markdown, rows

    return markdown(rows())


def generated() -> dict[Path, str]:
    return {DOCS / "troubleshooting.md": troubleshooting(), DOCS / "presets.md": presets()}


def main(argv: list[str]) -> int:
    stale = [p for p, text in generated().items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        if stale:
            print("out of date (run `make docs`): " + ", ".join(str(p.relative_to(REPO_ROOT)) for p in stale),
                  file=sys.stderr)
        return 1 if stale else 0
    for path, text in generated().items():
        if path in stale:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
