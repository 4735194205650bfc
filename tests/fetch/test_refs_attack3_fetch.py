"""Issue 42, third attacker pass (independent): a gated model in the namespace's cache, served to a tenant whose own
download was refused.

Seat: a tenant who may only create and edit LLMBackends (no Secrets) names a gated Hub repository that another
team's backend downloaded with its own token. Method: the operator's model-cache step (controller/modelcache.py) on
the fake API server, the real download program against the Hub-shaped server (gated: 401 without a token), one
directory standing for the shared cache claim; then the operator's decide step for the tenant's backend, and the
path its serving pods wait on, looked up in that directory.

Convention: a probe that breaks a claim asserts the safe behaviour and is a strict expected failure whose reason
starts with FINDING and its severity; a broken precondition raises PreconditionError, which the xfail mark does not take.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import checkpoint_files, run_fetch
from test_model_fetch import downloaded

from devcluster.cli import topology_nodes
from llmbackend import model_fetch as mf
from llmbackend.api.v1alpha1 import LLMBackendSpec
from llmbackend.controller import egress
from llmbackend.controller import modelcache as cmc
from llmbackend.controller.decide import Observed, decide
from llmbackend.controller.fakekube import FakeKube
from llmbackend.planning.inventory import Inventory
from llmbackend.render import modelcache as mc

GATED = "hf://meta-llama/Llama-3.1-8B-Instruct"  # gated on the Hub-shaped server: 401 without a token
SECRETS = {"team-a-hf": {"HF_TOKEN": "hf_good"}}  # team A's; the tenant may not read it


class PreconditionError(Exception):
    """The scene of a probe could not be set: an error, never the expected failure (the xfail marks take only
    AssertionError)."""


def precondition(ok: object, what: str) -> None:
    if not ok:
        raise PreconditionError(what)


@pytest.fixture
def allowed(hub):
    saved = egress.settings.model_endpoints
    egress.settings.configure(model_endpoints=(hub.endpoint,))
    yield hub
    egress.settings.configure(model_endpoints=saved)


def _jobs(kube: FakeKube) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in kube.objects.values()
            if o.get("kind") == "Job" and o["metadata"]["labels"].get("app.kubernetes.io/component") == mc.DOWNLOAD_COMPONENT}


def _run(job: dict, root: Path, expect: int) -> None:
    """The Job's own command line (the real program), with the kubelet's environment from SECRETS."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {}
    for item in container.get("env") or []:
        ref = (item.get("valueFrom") or {}).get("secretKeyRef")
        if ref is None:
            env[item["name"]] = item.get("value", "")
        elif ref["key"] in SECRETS.get(ref["name"], {}):
            env[item["name"]] = SECRETS[ref["name"]][ref["key"]]
    mount = container["volumeMounts"][0]["mountPath"]
    args = [a.replace(mount, str(root)) if a.startswith(mount) else a for a in container["args"]]
    done = run_fetch(*args, "--termination-log", str(root.parent / "termination"), env=env)
    precondition(done.returncode == expect, f"the download exits {expect}: {done.stderr}")


def _finish(kube: FakeKube, job: dict, root: Path, exit_code: int) -> None:
    name = job["metadata"]["name"]
    live = kube.objects[("Job", "serving", name)]
    live["status"] = {"conditions": [{"type": "Complete" if exit_code == 0 else "Failed", "status": "True"}]}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": live["metadata"]["uid"], "controller": True}
    message = (root.parent / "termination").read_bytes()[:4096].decode(errors="replace")
    kube.objects[("Pod", "serving", f"{name}-pod")] = {
        "metadata": {"name": f"{name}-pod", "labels": {**live["spec"]["template"]["metadata"]["labels"], "job-name": name},
                     "ownerReferences": [owner], "creationTimestamp": "2026-12-03T00:00:00Z"},
        "status": {"containerStatuses": [{"name": "fetch", "state": {"terminated": {"exitCode": exit_code,
                                                                                   "message": message}}}]}}


def _backend(name: str, source: dict) -> dict:
    return {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "status": {},
            "metadata": {"name": name, "namespace": "serving", "uid": f"uid-{name}", "generation": 1},
            "spec": {"model": {"preset": "llama-3.1-8b", "source": source}}}


# Fixed (was a strict xfail): FINDING (medium): a backend whose own download of a gated source was refused (401,
# no secretRef) still got its Deployment (a preset gives the architecture), whose pods loaded the copy another
# team's token had downloaded. The workload now waits for the backend's own download Job to finish.
def test_a_tenant_whose_download_was_refused_gets_no_pods_that_load_another_team_s_gated_copy(allowed, tmp_path):
    """Tries: team A's `victim` (secretRef team-a-hf) downloads the gated model first; then the tenant's `thief`
    names the same URI without a Secret. Looks at what thief's serving pods would do: are they rendered, and is the
    copy they wait for complete?"""
    hub = allowed
    kube = FakeKube()
    victim_src = {"uri": GATED, "endpoint": hub.endpoint, "secretRef": {"name": "team-a-hf"}}
    thief_src = {"uri": GATED, "endpoint": hub.endpoint}
    for name, source in (("victim", victim_src), ("thief", thief_src)):
        kube.objects[("LLMBackend", "serving", name)] = _backend(name, source)
    victim = LLMBackendSpec.model_validate(_backend("victim", victim_src)["spec"])
    thief = LLMBackendSpec.model_validate(_backend("thief", thief_src)["spec"])
    root = tmp_path / "claim"

    cmc.sync_model_cache(kube, "serving", victim)
    cmc.sync_model_cache(kube, "serving", thief)
    jobs = _jobs(kube)
    victim_job = jobs[mc.download_job_name(victim.model.source)]
    thief_job = jobs[mc.download_job_name(thief.model.source)]
    _run(victim_job, root, expect=0)
    _finish(kube, victim_job, root, 0)
    precondition(cmc.sync_model_cache(kube, "serving", victim).ready, "team A's copy is complete")
    _run(thief_job, root, expect=10)  # no token: 401
    _finish(kube, thief_job, root, 10)
    refused = cmc.sync_model_cache(kube, "serving", thief)
    precondition((refused.ready, refused.reason, refused.permanent) == (False, "SourceUnauthorized", True),
                 "the tenant's own download was refused")

    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    obj = _backend("thief", thief_src)
    asked = decide(Observed(obj, inventory.nodes(), model_cache=refused))
    decision = decide(Observed(obj, inventory.nodes(), model_cache=refused, children={k: None for k in asked.look_up}))
    deployments = [o for o in decision.apply if o["kind"] == "Deployment" and o["metadata"]["name"] == "thief"]
    loads = []
    for deployment in deployments:
        for init in deployment["spec"]["template"]["spec"]["initContainers"]:
            marker = {e["name"]: e.get("value") for e in init.get("env", [])}.get("MARKER")
            if marker:  # the wait-model container: the pod starts once this file exists in the claim
                on_claim = root / Path(marker).relative_to(mc.CACHE_MOUNT)
                if on_claim.exists():
                    loads.append((str(marker), json.loads(on_claim.read_text())["source"]))
    assert loads == [], f"thief's pods would start on team A's copy: {loads}"


def _decide_kinds(name: str, source: dict, result) -> list[dict]:
    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    obj = _backend(name, source)
    asked = decide(Observed(obj, inventory.nodes(), model_cache=result))
    return decide(Observed(obj, inventory.nodes(), model_cache=result,
                           children={k: None for k in asked.look_up})).apply


def test_a_public_source_another_backend_downloaded_is_served_after_a_check_of_the_backend_s_own(allowed, tmp_path):
    """The other side of the fix: a public repo (no token needed) that team A's backend downloaded with its Secret.
    The tenant's backend without one gets no pods until its own Job ran; that Job lists the source with no token,
    finds the copy, re-hashes it and reuses it (no weight is fetched again), and then the pods are rendered, mounting
    that copy and nothing else of the claim."""
    hub = allowed
    kube = FakeKube()
    public = "hf://acme/tiny-llama"
    owner_src = {"uri": public, "endpoint": hub.endpoint, "secretRef": {"name": "team-a-hf"}}
    tenant_src = {"uri": public, "endpoint": hub.endpoint}
    for name, source in (("owner", owner_src), ("tenant", tenant_src)):
        kube.objects[("LLMBackend", "serving", name)] = _backend(name, source)
    owner = LLMBackendSpec.model_validate(_backend("owner", owner_src)["spec"])
    tenant = LLMBackendSpec.model_validate(_backend("tenant", tenant_src)["spec"])
    root = tmp_path / "claim"
    cmc.sync_model_cache(kube, "serving", owner)
    owner_job = _jobs(kube)[mc.download_job_name(owner.model.source)]
    _run(owner_job, root, expect=0)
    _finish(kube, owner_job, root, 0)
    precondition(cmc.sync_model_cache(kube, "serving", owner).ready, "team A's copy is complete")

    pending = cmc.sync_model_cache(kube, "serving", tenant)
    assert not pending.ready and not any(o["kind"] == "Deployment" for o in _decide_kinds("tenant", tenant_src, pending))
    tenant_job = _jobs(kube)[mc.download_job_name(tenant.model.source)]
    assert mc.job_secrets(tenant_job) == []  # its own check: no token
    files_before = downloaded(hub)
    _run(tenant_job, root, expect=0)
    assert downloaded(hub) == files_before  # the copy was reused: nothing downloaded again, only its access checked
    _finish(kube, tenant_job, root, 0)
    ready = cmc.sync_model_cache(kube, "serving", tenant)
    assert ready.ready
    (deployment,) = [o for o in _decide_kinds("tenant", tenant_src, ready) if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    mounts = [m for c in pod["initContainers"] + pod["containers"] for m in c.get("volumeMounts", [])
              if m["name"] == mc.SERVING_VOLUME]
    ref = mc.ref_path(tenant.model.source)
    assert mounts and all(m["subPath"] == ref and m["readOnly"] for m in mounts)
    # what the kubelet would bind: the ref resolved inside the claim, the copy's own folder, with the marker in it
    copy = (root / ref).resolve()
    assert copy.parent == (root / ref).parent.parent.resolve() and (copy / mf.MARKER).is_file()


def test_a_gated_repo_whose_listing_is_open_is_not_served_to_a_backend_without_a_token(allowed, tmp_path):
    """The Hub lists a gated repository's files to anyone (hubserver.Repo.open_listing): a listing proves nothing.
    The tenant's own Job, finding team A's copy, asks for each file's first byte with its own (no) token before it
    reuses the copy, gets 401 and fails (SourceUnauthorized): no pods. Without that check the Job re-hashed team A's
    copy, reported Ready, and the tenant's pods were rendered on it."""
    hub = allowed
    hub.repos["meta-llama/Llama-3.1-8B-Instruct"].open_listing = True
    kube = FakeKube()
    victim_src = {"uri": GATED, "endpoint": hub.endpoint, "secretRef": {"name": "team-a-hf"}}
    thief_src = {"uri": GATED, "endpoint": hub.endpoint}
    for name, source in (("victim", victim_src), ("thief", thief_src)):
        kube.objects[("LLMBackend", "serving", name)] = _backend(name, source)
    victim = LLMBackendSpec.model_validate(_backend("victim", victim_src)["spec"])
    thief = LLMBackendSpec.model_validate(_backend("thief", thief_src)["spec"])
    root = tmp_path / "claim"
    cmc.sync_model_cache(kube, "serving", victim)
    victim_job = _jobs(kube)[mc.download_job_name(victim.model.source)]
    _run(victim_job, root, expect=0)
    _finish(kube, victim_job, root, 0)
    precondition(cmc.sync_model_cache(kube, "serving", victim).ready, "team A's copy is complete")
    cmc.sync_model_cache(kube, "serving", thief)
    thief_job = _jobs(kube)[mc.download_job_name(thief.model.source)]
    (container,) = thief_job["spec"]["template"]["spec"]["containers"]
    args = [a.replace(mc.CACHE_MOUNT, str(root)) if a.startswith(mc.CACHE_MOUNT) else a for a in container["args"]]
    done = run_fetch(*args, "--termination-log", str(root.parent / "termination"))
    assert done.returncode == 10, done.stdout + done.stderr
    _finish(kube, thief_job, root, done.returncode)
    refused = cmc.sync_model_cache(kube, "serving", thief)
    assert (refused.ready, refused.reason, refused.permanent) == (False, "SourceUnauthorized", True)
    assert not any(o["kind"] == "Deployment" for o in _decide_kinds("thief", thief_src, refused))


def test_an_s3_source_another_backend_downloaded_is_not_served_to_a_backend_without_keys(s3_endpoint, tmp_path):
    """S3 likewise: team A's backend downloads s3://<bucket>/llama with its keys; the tenant names the same source
    without a secretRef. Its own Job has no keys and fails at once (NoCredentials, permanent): no pods."""
    from test_model_fetch import S3_ENV, _s3_put
    bucket = "models-attack3"
    _s3_put(s3_endpoint, bucket)
    for path, data in checkpoint_files().items():
        _s3_put(s3_endpoint, f"{bucket}/llama/{path}", data)
    saved = egress.settings.model_endpoints
    egress.settings.configure(model_endpoints=(s3_endpoint,))
    SECRETS["team-a-s3"] = dict(S3_ENV)
    try:
        kube = FakeKube()
        owner_src = {"uri": f"s3://{bucket}/llama", "endpoint": s3_endpoint, "secretRef": {"name": "team-a-s3"}}
        tenant_src = {"uri": f"s3://{bucket}/llama", "endpoint": s3_endpoint}
        for name, source in (("owner", owner_src), ("tenant", tenant_src)):
            kube.objects[("LLMBackend", "serving", name)] = _backend(name, source)
        owner = LLMBackendSpec.model_validate(_backend("owner", owner_src)["spec"])
        tenant = LLMBackendSpec.model_validate(_backend("tenant", tenant_src)["spec"])
        root = tmp_path / "claim"
        cmc.sync_model_cache(kube, "serving", owner)
        cmc.sync_model_cache(kube, "serving", tenant)
        jobs = _jobs(kube)
        owner_job, tenant_job = (jobs[mc.download_job_name(s.model.source)] for s in (owner, tenant))
        _run(owner_job, root, expect=0)
        _finish(kube, owner_job, root, 0)
        precondition(cmc.sync_model_cache(kube, "serving", owner).ready, "team A's copy is complete")
        _run(tenant_job, root, expect=15)  # no keys
        _finish(kube, tenant_job, root, 15)
        refused = cmc.sync_model_cache(kube, "serving", tenant)
        precondition((refused.ready, refused.permanent) == (False, True), "the tenant's own download was refused")
        applied = _decide_kinds("tenant", tenant_src, refused)
        assert not any(o["kind"] == "Deployment" for o in applied)
    finally:
        SECRETS.pop("team-a-s3", None)
        egress.settings.configure(model_endpoints=saved)
