"""Issue 42, third attacker pass (independent), on the real API server with the shipped admission policy.

Seat: the user TENANT, bound in its namespace only to BACKEND_EDITOR_RULES (create, update, patch, delete
LLMBackends), plus, per probe, the narrow grants an admin would give (`use` on a claim or a queue, the `view` role).
Method: read docs/security.md, docs/security-rbac.md, manifests/default/admission-policy.yaml and
operator/llmbackend/render, then ask the API server as TENANT (`kubectl --as`, server-side dry runs where admission
alone decides). Render-level probes of the same specs are in tests/unit/test_refs_attack3.py.

Convention: a probe that holds asserts the claim; a probe that breaks one asserts the safe behaviour and is a strict
expected failure whose reason starts with FINDING and its severity. Preconditions (the policy is live, a grant is
enough for its own kind) are in fixtures or asserted first, so a broken precondition errors (PreconditionError, which the
xfail marks do not take), never passes as the expected failure.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from conftest import (
    BACKEND_EDITOR_RULES,
    ClusterHandle,
    apply_manifest,
    backend_manifest,
    fresh_namespace,
    grant,
    wait_for,
)

from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.render.modelcache import DEFAULT_CACHE_CLAIM
from llmbackend.render.names import BackendRef, launcher_account_name, serving_account_name
from llmbackend.render.workloads import RolloutStrategy, desired_objects

TENANT = "tenant-attack3"
VICTIM = "victim"  # an admin's backend next to the tenant's
LABELS_REFUSED = "remove podTemplate.labels and podTemplate.annotations"


class PreconditionError(Exception):
    """The scene of a probe could not be set: an error, never the expected failure (the xfail marks take only
    AssertionError)."""


def precondition(ok: object, what: str) -> None:
    if not ok:
        raise PreconditionError(what)


def as_tenant(cluster: ClusterHandle, manifest: dict[str, Any], *, dry_run: bool = True,
              user: str = TENANT) -> subprocess.CompletedProcess:
    args = ["apply", "--as", user, "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    return cluster.kubectl(*args, input=yaml.safe_dump(manifest), check=False)


def admitted(proc: subprocess.CompletedProcess) -> bool:
    if proc.returncode != 0:
        precondition("denied request" in proc.stderr or "Forbidden" in proc.stderr or "forbidden" in proc.stderr,
                     f"refused for another reason than admission or RBAC: {proc.stderr}")
    return proc.returncode == 0


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}x"  # a name ending in digits is refused (CRD rule)


@pytest.fixture(scope="module")
def tenant_ns(cluster: ClusterHandle, policy: ClusterHandle) -> Iterator[str]:
    """A namespace where TENANT may only edit LLMBackends, with an admin's backend `victim` in it, once the shipped
    policy refuses the tenant's podTemplate labels (the policy's plugin learns of policies asynchronously)."""
    with fresh_namespace(cluster, "atk3") as namespace:
        grant(cluster, TENANT, namespace, "backend-editor", BACKEND_EDITOR_RULES)
        apply_manifest(cluster, backend_manifest(VICTIM, namespace))
        canary = backend_manifest("canary", namespace, serving={"podTemplate": {"labels": {"app": "db"}}})
        wait_for(lambda: (p := as_tenant(cluster, canary)).returncode != 0 and LABELS_REFUSED in p.stderr,
                 timeout=60, what="the shipped policy refusing the tenant's podTemplate labels")
        assert admitted(as_tenant(cluster, backend_manifest("plain", namespace))), "precondition: a plain backend"
        yield namespace


# ---- queues: a `use` grant on one kind of queue, spent on the other ----

QUEUE_GRANTS = {
    "kueue": {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["use"], "resourceNames": ["gold"]},
    "volcano": {"apiGroups": ["scheduling.volcano.sh"], "resources": ["queues"], "verbs": ["use"],
                "resourceNames": ["gold"]},
}


def _queue_backend(namespace: str, name: str, gang: str) -> dict[str, Any]:
    return backend_manifest(name, namespace, model={"preset": "llama-3.1-405b", "source": {"uri": "s3://models/405b"}},
                            scheduling={"multiNode": {"gangScheduler": gang, "queueName": "gold"}})


@pytest.fixture(scope="module")
def queue_tenants(cluster: ClusterHandle, tenant_ns: str) -> dict[str, str]:
    """Two more users like TENANT, one granted `use` on the Kueue LocalQueue gold of the namespace, one on the
    Volcano Queue gold; each grant admits the queue of its own kind (precondition), none admits without a grant."""
    users = {kind: f"{TENANT}-{kind}" for kind in QUEUE_GRANTS}
    assert not admitted(as_tenant(cluster, _queue_backend(tenant_ns, "q-none", "kueue"))), "no grant: refused"
    for kind, user in users.items():
        grant(cluster, user, tenant_ns, f"editor-{kind}", BACKEND_EDITOR_RULES)
        grant(cluster, user, tenant_ns, f"queue-{kind}", [QUEUE_GRANTS[kind]])
        own = _queue_backend(tenant_ns, f"q-own-{kind}", kind)
        wait_for(lambda own=own, user=user: admitted(as_tenant(cluster, own, user=user)), timeout=30,
                 what=f"{user} admitted to its own {kind} queue")
    return users


# Fixed (was a strict xfail): FINDING (low): the policy accepted `use` on a Kueue LocalQueue OR a Volcano Queue of that
# name, whichever multiNode.gangScheduler then picked, so a grant on the team's own LocalQueue gold admitted the
# cluster-scoped Volcano Queue gold (and the other way round). The policy now asks for the kind gangScheduler picks.
@pytest.mark.parametrize("granted,spent", [("kueue", "volcano"), ("volcano", "kueue")])
def test_a_use_grant_on_one_kind_of_queue_admits_only_that_kind(cluster, tenant_ns, queue_tenants, granted, spent):
    """Tries: a tenant granted `use` on the queue gold of one kind (Kueue LocalQueue / Volcano Queue) sets
    gangScheduler to the other kind with the same queueName."""
    other = _queue_backend(tenant_ns, unique("q-"), spent)
    assert not admitted(as_tenant(cluster, other, user=queue_tenants[granted]))


@pytest.mark.parametrize("granted", ["kueue", "volcano"])
def test_gang_scheduler_auto_needs_use_on_both_kinds_of_queue(cluster, tenant_ns, queue_tenants, granted):
    """auto picks Volcano when it is served, else Kueue: a grant on one kind does not cover what auto may pick."""
    refused = as_tenant(cluster, _queue_backend(tenant_ns, unique("q-"), "auto"), user=queue_tenants[granted])
    assert not admitted(refused) and "auto may pick either kind" in refused.stderr, refused.stderr
    unused = _queue_backend(tenant_ns, unique("q-"), "none")  # no gang scheduler: the queue name is not used
    assert admitted(as_tenant(cluster, unused, user=queue_tenants[granted]))


# ---- ServiceAccounts ----

@pytest.mark.parametrize("account", [f"{VICTIM}-serving", f"{VICTIM}-launcher", f"{VICTIM}-epp", "default",
                                     "plain-serving", "victim's own", "victim's launcher"])
def test_a_tenant_cannot_name_another_backend_s_or_the_namespace_s_account(cluster, tenant_ns, account):
    """Tries: podTemplate.serviceAccountName set to the admin's backend's own serving account (as named before the
    uid tag, and as named now), its MPI launcher account (exec rights into its workers; both forms), its EPP account
    (token mounted), the namespace's default, and the tenant's own backend's `plain-serving`, on create and as an
    update of the tenant's backend `plain`."""
    if account.startswith("victim's"):
        victim = BackendRef(VICTIM, tenant_ns, cluster.kube.get("LLMBackend", tenant_ns, VICTIM)["metadata"]["uid"])
        account = (serving_account_name if account == "victim's own" else launcher_account_name)(victim)
    manifest = backend_manifest(unique("sa-"), tenant_ns, serving={"podTemplate": {"serviceAccountName": account}})
    refused = as_tenant(cluster, manifest)
    assert not admitted(refused) and "you may not act as this ServiceAccount" in refused.stderr
    assert as_tenant(cluster, backend_manifest("plain", tenant_ns), dry_run=False).returncode == 0
    update = backend_manifest("plain", tenant_ns, serving={"podTemplate": {"serviceAccountName": account}})
    assert not admitted(as_tenant(cluster, update))


@pytest.mark.parametrize("name", ["victim-serving", "team-launcher", "team-epp", "team-activator", "team-model-repo"])
def test_a_tenant_cannot_name_a_backend_after_another_backend_s_account(cluster, tenant_ns, name):
    """Tries: a backend whose own name is another backend's child name (its `-serving` or `-launcher` account, its EPP
    account), so that its children, or the accounts it runs as, are another backend's."""
    refused = as_tenant(cluster, backend_manifest(name, tenant_ns))
    assert refused.returncode != 0 and "metadata.name must not end with" in refused.stderr, refused.stderr


# ---- claims mounted read-only: `use` by name, nothing else ----

def _claim_fields(claim: str) -> dict[str, dict[str, Any]]:
    return {
        "source-pvc": {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": claim, "path": "/m"}}}},
        "adapter-pvc": {"adapters": [{"name": "sql", "source": {"pvc": {"claimName": claim, "path": "/sql"}}}]},
        "volume-read-only": {"serving": {"podTemplate": {
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}],
            "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}]}}},
    }


CLAIM_GRANTS = {
    # the built-in view role: get, list, watch on every claim of the namespace
    "view": None,
    "get-list-watch": {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"],
                       "resourceNames": ["private"]},
    "use-on-a-prefix-of-its-name": {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["use"],
                                    "resourceNames": ["priv", "private-copy"]},
    "use-on-the-persistent-volume": {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["use"],
                                     "resourceNames": ["private"]},
    "use-on-a-subresource": {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"], "verbs": ["use"],
                             "resourceNames": ["private"]},
    "use-in-another-group": {"apiGroups": ["storage.k8s.io"], "resources": ["persistentvolumeclaims"],
                             "verbs": ["use"], "resourceNames": ["private"]},
}


@pytest.mark.parametrize("grant_name", sorted(CLAIM_GRANTS))
@pytest.mark.parametrize("field", ["source-pvc", "adapter-pvc", "volume-read-only"])
def test_a_read_only_claim_needs_use_on_that_claim_and_nothing_near_it(cluster, tenant_ns, grant_name, field):
    """Tries: another team's claim `private`, mounted read-only through each field that mounts a claim read-only,
    by a user holding rights near `use` on it: get/list/watch (the view role on every claim, or on it by name), `use`
    on names that prefix or extend it, on the PersistentVolume of that name, on a subresource, in another API group.
    Last, a `use` grant on `private` in ANOTHER namespace (the tenant's own) must not count here either."""
    user = f"{TENANT}-{grant_name}"
    grant(cluster, user, tenant_ns, f"editor-{grant_name}", BACKEND_EDITOR_RULES)
    rule = CLAIM_GRANTS[grant_name]
    if rule is None:
        grant(cluster, user, tenant_ns, f"claims-{grant_name}", cluster_role="view")
    else:
        grant(cluster, user, tenant_ns, f"claims-{grant_name}", [rule])
    manifest = backend_manifest(unique("claim-"), tenant_ns, **_claim_fields("private")[field])
    refused = as_tenant(cluster, manifest, user=user)
    assert not admitted(refused) and "PersistentVolumeClaim you may not use" in refused.stderr, refused.stderr


def test_use_granted_in_another_namespace_does_not_count(cluster, tenant_ns):
    """Tries: the tenant's admin in ITS OWN namespace grants it `use` on every claim there (and on `private`); the
    backend in the victim namespace names that namespace's `private`. Then the right grant: admitted (precondition)."""
    user = f"{TENANT}-elsewhere"
    grant(cluster, user, tenant_ns, "editor-elsewhere", BACKEND_EDITOR_RULES)
    with fresh_namespace(cluster, "atk3own") as own:
        grant(cluster, user, own, "use-all-claims", [{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                                                       "verbs": ["use", "get", "create"]}])
        for fields in _claim_fields("private").values():
            assert not admitted(as_tenant(cluster, backend_manifest(unique("x-"), tenant_ns, **fields), user=user))
    grant(cluster, user, tenant_ns, "use-private", [{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                                                     "verbs": ["use"], "resourceNames": ["private"]}])
    for fields in _claim_fields("private").values():
        manifest = backend_manifest(unique("x-"), tenant_ns, **fields)
        wait_for(lambda manifest=manifest: admitted(as_tenant(cluster, manifest, user=user)), timeout=30,
                 what="admitted once `use` is granted here")


# ---- labels and annotations: every way of writing the spec ----

PATCHES = {
    "json-patch": ["patch", "llmbackend", "plain", "--type=json", "-p",
                   json.dumps([{"op": "add", "path": "/spec/serving", "value": {"podTemplate": {"labels": {"app": "db"}}}}])],
    "merge-patch": ["patch", "llmbackend", "plain", "--type=merge", "-p",
                    json.dumps({"spec": {"serving": {"podTemplate": {"annotations": {"sidecar.istio.io/userVolume": "[]"}}}}})],
    "server-side-apply": None,
    "empty-label-value": ["patch", "llmbackend", "plain", "--type=merge", "-p",
                          json.dumps({"spec": {"serving": {"podTemplate": {"labels": {"app": ""}}}}})],
}


@pytest.mark.parametrize("how", sorted(PATCHES))
def test_labels_and_annotations_are_refused_however_the_update_is_written(cluster, tenant_ns, how):
    """Tries: labels or annotations added to the tenant's own existing backend by JSON patch, merge patch, server-side
    apply (a field manager of its own), and a label with an empty value (a selector `app` matches on the key alone)."""
    assert as_tenant(cluster, backend_manifest("plain", tenant_ns), dry_run=False).returncode == 0
    args = PATCHES[how]
    if args is None:
        manifest = backend_manifest("plain", tenant_ns, serving={"podTemplate": {"labels": {"app": "db"}}})
        proc = cluster.kubectl("apply", "--server-side", "--field-manager", "attacker", "--force-conflicts",
                               "--dry-run=server", "--as", TENANT, "-f", "-", input=yaml.safe_dump(manifest), check=False)
    else:
        proc = cluster.kubectl(*args, "-n", tenant_ns, "--as", TENANT, "--dry-run=server", check=False)
    assert not admitted(proc) and LABELS_REFUSED in proc.stderr, proc.stderr


def test_the_backend_s_own_labels_and_annotations_reach_no_child(cluster, tenant_ns):
    """Tries: metadata.labels and annotations of the LLMBackend itself are not judged (the policy looks at the spec
    only), so the tenant sets `app: db` and an Istio volume annotation there; the operator renders children from
    name, namespace, uid and spec only, so none of it may show up on a child."""
    manifest = backend_manifest("plain", tenant_ns)
    manifest["metadata"]["labels"] = {"app": "db", "kueue.x-k8s.io/queue-name": "gold"}
    manifest["metadata"]["annotations"] = {"sidecar.istio.io/userVolume": "[]"}
    proc = as_tenant(cluster, manifest)
    assert admitted(proc), "precondition: metadata-only changes are not judged"
    stored = json.loads(proc.stdout)
    objects = desired_objects(BackendRef("plain", tenant_ns, stored["metadata"]["uid"]),
                              LLMBackendSpec.model_validate(stored["spec"]), _ONE_NODE, 1, _SURGE)
    text = json.dumps(objects)
    assert '"app": "db"' not in text and "queue-name" not in text and "userVolume" not in text


# ---- the namespace's model cache, mounted through a uri source ----

_ONE_NODE = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                       memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
_SURGE = RolloutStrategy("RollingUpdate", 1, 0)


# Fixed (was a strict xfail): FINDING (medium): any hf:// or s3:// source mounted the WHOLE namespace cache claim
# read-only into pods running the tenant's image, so every other backend's copy (gated models downloaded with
# Secrets the tenant cannot read) was readable there. Serving pods now mount only their own copy (subPath).
def test_a_tenant_refused_the_cache_claim_does_not_get_it_mounted_through_a_uri_source(cluster, tenant_ns):
    """Tries: first the claim through a podTemplate volume (refused: precondition), then the same tenant names a uri
    source (any Hub repo) and the spec the API server admitted is rendered as the operator would."""
    direct = backend_manifest(unique("cache-"), tenant_ns, serving={"podTemplate": {
        "volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": DEFAULT_CACHE_CLAIM, "readOnly": True}}],
        "volumeMounts": [{"name": "c", "mountPath": "/c", "readOnly": True}]}})
    refused = as_tenant(cluster, direct)
    precondition(not admitted(refused) and "PersistentVolumeClaim you may not use" in refused.stderr, refused.stderr)
    via_uri = backend_manifest("cache-uri", tenant_ns, model={"preset": "llama-3.1-8b",
                                                              "source": {"uri": "hf://anyone/any-model"}})
    proc = as_tenant(cluster, via_uri)
    precondition(admitted(proc), "a uri source is admitted")
    stored = json.loads(proc.stdout)
    objects = desired_objects(BackendRef("cache-uri", tenant_ns, stored["metadata"]["uid"] or "u"),
                              LLMBackendSpec.model_validate(stored["spec"]), _ONE_NODE, 1, _SURGE)
    whole = [(t["metadata"].get("labels", {}).get("app.kubernetes.io/component"), m["mountPath"])
             for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "cache-uri"
             for t in [o["spec"]["template"]]
             for c in [*t["spec"]["initContainers"], *t["spec"]["containers"]]
             for m in c.get("volumeMounts", [])
             for v in t["spec"]["volumes"]
             if v["name"] == m["name"] and (v.get("persistentVolumeClaim") or {}).get("claimName") == DEFAULT_CACHE_CLAIM
             and not m.get("subPath")]
    assert whole == [], f"the whole cache claim is mounted at {whole}"


# ---- the backend's own account, reached by editing or re-creating another's backend ----

TENANT_IMAGE = "registry.example/tenant/tools:1"


def _admins_backend(cluster: ClusterHandle, namespace: str) -> tuple[str, str]:
    """An admin's backend and the account its pods run as, <name>-serving-<tag of its uid>, which the tenant may not
    name in podTemplate.serviceAccountName (precondition)."""
    admins = unique("admins-")
    apply_manifest(cluster, backend_manifest(admins, namespace))
    uid = cluster.kube.get("LLMBackend", namespace, admins)["metadata"]["uid"]
    account = serving_account_name(BackendRef(admins, namespace, uid))
    named = backend_manifest(unique("sa-"), namespace, serving={"podTemplate": {"serviceAccountName": account}})
    precondition(not admitted(as_tenant(cluster, named)), "the account by name is refused")
    return admins, account


def _runs_as(cluster: ClusterHandle, proc: subprocess.CompletedProcess, name: str) -> str:
    """The account the pods of the backend the API server answered with run as, rendered as the operator would."""
    stored = json.loads(proc.stdout)
    precondition(stored["metadata"].get("uid"), "the answer carries the backend's uid")
    objects = desired_objects(BackendRef(name, stored["metadata"]["namespace"], stored["metadata"]["uid"]),
                              LLMBackendSpec.model_validate(stored["spec"]), _ONE_NODE, 1, _SURGE)
    workload = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
    pod = workload["spec"]["template"]["spec"]
    precondition(pod["containers"][0]["image"] == TENANT_IMAGE, "the pods run the tenant's image")
    return str(pod["serviceAccountName"])


# Fixed (was a strict xfail, parametrized `delete-and-recreate`): FINDING (medium): the implicit account
# <name>-serving is judged nowhere; deleting the admin's backend `victim` and creating it again with the tenant's spec
# ran the tenant's image as victim-serving, and whatever an admin tied to that account by name (a RoleBinding, an EKS
# Pod Identity association, a GKE workload identity principal) with it. The accounts the operator creates now carry a
# tag of the backend's uid (render/names.py account_tag): a backend created again gets an account nobody bound.
def test_a_tenant_cannot_run_its_image_as_another_backend_s_own_account_by_creating_it_again(cluster, tenant_ns):
    """Tries: an admin's backend runs as <its name>-serving-<tag>. The tenant, refused that account by name
    (precondition), deletes the backend and creates its own under the same name."""
    admins, account = _admins_backend(cluster, tenant_ns)
    deleted = cluster.kubectl("delete", "llmbackend", admins, "-n", tenant_ns, "--as", TENANT, check=False)
    precondition(deleted.returncode == 0, deleted.stderr)
    wait_for(lambda: cluster.kube.get("LLMBackend", tenant_ns, admins) is None, timeout=30, what="deleted")
    proc = as_tenant(cluster, backend_manifest(admins, tenant_ns, engine={"image": TENANT_IMAGE}), dry_run=False)
    precondition(admitted(proc), proc.stderr)
    assert _runs_as(cluster, proc, admins) != account


# Was the strict xfail's `edit-image` case; now the documented rule (docs/security.md, "Trust model"; docs/pod-
# template.md): an edit of a backend is judged as the backend is, and whoever may edit it chooses what runs as its
# own account, as an editor of a Deployment does for the Deployment's. Admission cannot tell the tenant's edit of the
# admin's backend from the tenant's edit of its own, and an account that changed with every edit would lose whatever
# an admin bound to it. So bind to a backend's own account only what every LLMBackend editor of the namespace may
# hold; a narrower identity goes in an account named in podTemplate.serviceAccountName, which the policy judges on
# every edit (the next test).
def test_an_editor_of_a_backend_runs_its_image_as_that_backend_s_own_account_as_documented(cluster, tenant_ns):
    """Holds: the tenant edits only engine.image of the admin's backend; its pods keep the backend's own account."""
    admins, account = _admins_backend(cluster, tenant_ns)
    proc = as_tenant(cluster, backend_manifest(admins, tenant_ns, engine={"image": TENANT_IMAGE}))
    precondition(admitted(proc), proc.stderr)
    assert _runs_as(cluster, proc, admins) == account


def test_an_edit_of_a_backend_that_names_an_account_is_judged_again(cluster, tenant_ns):
    """Holds: an admin's backend runs as an account the admin named (podTemplate.serviceAccountName), which the tenant
    may not act as; the tenant's edit of that backend, the account left as it is, is refused."""
    cluster.kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "admins-identity", "namespace": tenant_ns}})
    admins = unique("named-")
    serving = {"podTemplate": {"serviceAccountName": "admins-identity"}}
    apply_manifest(cluster, backend_manifest(admins, tenant_ns, serving=serving))
    edit = backend_manifest(admins, tenant_ns, serving=serving, engine={"image": TENANT_IMAGE})
    refused = as_tenant(cluster, edit)
    assert not admitted(refused) and "you may not act as this ServiceAccount" in refused.stderr, refused.stderr


_TWO_NODES = PlanStatus(tensor_parallel=8, pipeline_parallel=2, gpus_per_replica=16, nodes_per_replica=2,
                        memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")


# Fixed (was a strict xfail): FINDING (medium): a RoleBinding (or ClusterRoleBinding) that names a ServiceAccount
# that does not exist yet, e.g. a CI system's `ci-launcher`, was taken over by naming a multi-node TensorRT-LLM
# backend `ci`: the operator created the account ci-launcher (never-adopt checks only the account and the RoleBinding
# of that name, and neither existed) and mounted its token into the leader, which runs the tenant's image. The same
# for `<name>-serving` (no token, but identities bound by name need none). The operator's accounts are now
# <name>-launcher-<tag> and <name>-serving-<tag>, tag from the backend's uid (render/names.py account_tag): no name
# anyone could bind before the backend existed.
def test_an_account_the_operator_creates_holds_no_right_someone_bound_to_its_name_before(cluster, tenant_ns):
    """Tries: an admin's RoleBinding grants `get secrets` to the ServiceAccounts ci-launcher and ci-serving, which do
    not exist (deleted with their CI system, or not created yet). The tenant creates a multi-node TensorRT-LLM backend
    `ci` and looks at the accounts the operator would create and the token its leader image would hold (a 405B model
    in 16 bits needs two 8-GPU H100 nodes: the plan rendered is that two-node one)."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "ci-secrets", "namespace": tenant_ns},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "ci-secrets", "namespace": tenant_ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ci-secrets"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": tenant_ns}
                      for name in ("ci-launcher", "ci-serving")]}]))
    for name in ("ci-launcher", "ci-serving"):
        precondition(cluster.kube.get("ServiceAccount", tenant_ns, name) is None, f"no account {name}")
        precondition(cluster.kubectl("auth", "can-i", "get", "secrets", "-n", tenant_ns, "--as",
                                     f"system:serviceaccount:{tenant_ns}:{name}", check=False).stdout.strip() == "yes",
                     f"the binding grants {name}")
    precondition(cluster.kubectl("auth", "can-i", "get", "secrets", "-n", tenant_ns,
                           "--as", TENANT, check=False).stdout.strip() == "no", "the tenant may not read Secrets")

    manifest = backend_manifest("ci", tenant_ns, model={"preset": "llama-3.1-405b", "source": {"uri": "s3://models/405b"}},
                                engine={"backend": "tensorrtllm", "image": TENANT_IMAGE})
    proc = as_tenant(cluster, manifest)
    precondition(admitted(proc), proc.stderr)
    stored = json.loads(proc.stdout)
    objects = desired_objects(BackendRef("ci", tenant_ns, stored["metadata"]["uid"] or "u"),
                              LLMBackendSpec.model_validate(stored["spec"]), _TWO_NODES, 1, _SURGE)
    created = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    tokens = set()
    for obj in objects:
        if obj["kind"] != "LeaderWorkerSet":
            continue
        for template in obj["spec"]["leaderWorkerTemplate"].values():
            pod = template.get("spec") if isinstance(template, dict) else None
            if pod and pod.get("automountServiceAccountToken") and any(
                    c["image"] == TENANT_IMAGE for c in pod["containers"]):
                tokens.add(pod["serviceAccountName"])
    precondition(tokens and created, f"the operator creates accounts ({created}) and the leader holds a token")
    assert not {"ci-launcher", "ci-serving"} & set(created), created
    held = {account for account in [*tokens, *created] if cluster.kubectl(
        "auth", "can-i", "get", "secrets", "-n", tenant_ns, "--as", f"system:serviceaccount:{tenant_ns}:{account}",
        check=False).stdout.strip() == "yes"}
    assert held == set(), f"the tenant's pods run as {held}, which may read Secrets"
