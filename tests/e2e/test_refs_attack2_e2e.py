"""Independent attacker pass (attack2) on the trust model for object references (docs/security.md, "Trust model"),
on the real API server behind the shipped ValidatingAdmissionPolicy (manifests/default/admission-policy.yaml).

The seat: TENANT may create, update, patch and delete LLMBackends in its namespace and nothing else, acting through
`kubectl --as` (variants: plus the built-in `view` role; plus `use` on one claim). The victim objects are the
namespace's own: another team's claim, the model cache, pods of other workloads. Probes that hold assert the claim
plainly; probes that break it assert the SAFE behaviour and are xfail(strict=True) with the finding and its severity;
their preconditions sit in fixtures, so that a broken precondition errors instead of passing as an expected failure.
Most probes are server-side dry runs: admission runs in full (the policy included), nothing is stored. The render
half is tests/unit/test_refs_attack2.py.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from conftest import BACKEND_EDITOR_RULES, backend_manifest, wait_for
from conftest import grant as grant_user

from llmbackend.render.multinode import launcher_cluster_role, launcher_rbac
from llmbackend.render.names import BackendRef, launcher_account_name

TENANT = "tenant-attack2"
CLAIM = "team-b-data"  # another team's claim; the tenant gets `use` on it only where a test says so
OTHER = "team-c-data"
API = "/apis/llmbackend.dev/v1alpha1/namespaces/{ns}/llmbackends"


def as_tenant(cluster, *args: str, input: str | None = None):
    return cluster.kubectl(*args, "--as", TENANT, check=False, input=input)


def grant(cluster, namespace: str, name: str, rules: list[dict[str, Any]] | None = None,
          cluster_role: str | None = None) -> None:
    grant_user(cluster, TENANT, namespace, name, rules, cluster_role)


def use_claim(cluster, namespace: str, claim: str = CLAIM) -> None:
    grant(cluster, namespace, f"use-{claim}", [{"apiGroups": [""], "resources": ["persistentvolumeclaims"],
                                                "resourceNames": [claim], "verbs": ["use"]}])
    wait_for(lambda: as_tenant(cluster, "auth", "can-i", "use", f"persistentvolumeclaim/{claim}", "-n", namespace)
             .stdout.strip() == "yes", timeout=20, what=f"use on {claim}")


def spec_with(namespace: str, name: str = "probe", **spec: Any) -> dict[str, Any]:
    return backend_manifest(name, namespace, **spec)


def claim_volume(claim: str, name: str = "data", **pvc: Any) -> dict[str, Any]:
    return {"volumes": [{"name": name, "persistentVolumeClaim": {"claimName": claim, **pvc}}],
            "volumeMounts": [{"name": name, "mountPath": f"/{name}"}]}


def template(namespace: str, podtemplate: dict[str, Any], name: str = "probe", **spec: Any) -> dict[str, Any]:
    return spec_with(namespace, name, serving={"podTemplate": podtemplate}, **spec)


def dry_run(cluster, manifest: dict[str, Any]):
    return as_tenant(cluster, "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(manifest))


def raw_dry_run(cluster, namespace: str, body: str):
    """POST a body byte for byte (kubectl would re-encode duplicate keys), as the tenant, server-side dry run."""
    path = API.format(ns=namespace) + "?dryRun=All"
    return as_tenant(cluster, "create", "--raw", path, "-f", "-", input=body)


class PreconditionFailed(RuntimeError):
    """A finding's fixture could not set the scene: an error, never an expected failure (the xfail marks take only
    AssertionError)."""


@contextlib.contextmanager
def precondition(what: str) -> Iterator[None]:
    try:
        yield
    except AssertionError as exc:
        raise PreconditionFailed(f"{what}: {exc}") from exc


def refused_by_policy(proc) -> bool:
    return proc.returncode != 0 and "llmbackend-tenant-references" in proc.stderr


@pytest.fixture
def tenant(policy, namespace):
    """`namespace`, where TENANT may only create, edit, read and delete LLMBackends; the policy is armed there."""
    grant(policy, namespace, "llmbackend-editor", BACKEND_EDITOR_RULES)
    # the admission plugin learns of policies asynchronously: wait until it refuses a Secret the tenant cannot read
    # (a term no claim probe here depends on)
    sentinel = template(namespace, {"imagePullSecrets": [{"name": "not-yours"}]})
    wait_for(lambda: refused_by_policy(dry_run(policy, sentinel)), timeout=30, what="the policy to refuse a Secret")
    return namespace


# ---- holds: what the shipped policy refuses ----

@pytest.mark.parametrize("body_volume,why", [
    ('{"claimName": "@C", "readOnly": true, "readOnly": false}', "duplicate key, the later false"),
    ('{"claimName": "@C", "ReadOnly": true}', "another case: pruned, so writable"),
    ('{"claimName": "@C", "readonly": true}', "lower case: pruned, so writable"),
    ('{"claimName": "@C", "readOnly": "true"}', "a string"),
    ('{"claimName": "@C", "readOnly": 1}', "a number"),
    ('{"claimName": "@C", "readOnly": null}', "null: pruned, so writable"),
    ('{"claimName": "@O", "claimName": "@C", "readOnly": true}', "duplicate claimName"),
])
def test_json_tricks_on_a_claim_volume_never_pass_as_read_only(cluster, tenant, body_volume, why):
    use_claim(cluster, tenant)  # `use` on CLAIM: a read-only mount of it is admitted, a writable one is not
    body = ('{"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "metadata": {"name": "probe", '
            '"namespace": "@N"}, "spec": {"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://models/m"}}, '
            '"serving": {"podTemplate": {"volumes": [{"name": "data", "persistentVolumeClaim": @V}], '
            '"volumeMounts": [{"name": "data", "mountPath": "/data"}]}}}}')
    body = body.replace("@N", tenant).replace("@V", body_volume).replace("@C", CLAIM).replace("@O", OTHER)
    proc = raw_dry_run(cluster, tenant, body)
    if proc.returncode == 0:  # admitted: then what would be stored is exactly what the policy judged read-only
        volume = json.loads(proc.stdout)["spec"]["serving"]["podTemplate"]["volumes"][0]["persistentVolumeClaim"]
        assert volume == {"claimName": CLAIM, "readOnly": True}, f"{why}: admitted as {volume}"
    else:
        assert "llmbackend-tenant-references" in proc.stderr or "Invalid value" in proc.stderr, (why, proc.stderr)


def test_a_read_only_mount_with_use_is_admitted_and_the_mount_cannot_undo_it(cluster, tenant):
    use_claim(cluster, tenant)
    proc = dry_run(cluster, template(tenant, {**claim_volume(CLAIM, readOnly=True), "volumeMounts": [
        {"name": "data", "mountPath": "/data", "readOnly": False}]}))
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)["spec"]["serving"]["podTemplate"]
    assert stored["volumes"][0]["persistentVolumeClaim"] == {"claimName": CLAIM, "readOnly": True}


def _create_read_only(cluster, namespace: str) -> None:
    use_claim(cluster, namespace)
    proc = as_tenant(cluster, "create", "-f", "-", input=json.dumps(template(namespace, claim_volume(CLAIM, readOnly=True))))
    assert proc.returncode == 0, proc.stderr


def _stored_read_only(cluster, namespace: str) -> Any:
    obj = cluster.kube.get("LLMBackend", namespace, "probe")
    return obj["spec"]["serving"]["podTemplate"]["volumes"][0]["persistentVolumeClaim"].get("readOnly")


@pytest.mark.parametrize("how", ["json-replace", "json-remove", "json-add-second-volume", "merge-null",
                                 "merge-false", "apply-other-manager", "replace-whole", "edit-adds-cache-claim"])
def test_an_update_cannot_make_an_admitted_read_only_claim_writable(cluster, tenant, how):
    _create_read_only(cluster, tenant)
    pvc = "/spec/serving/podTemplate/volumes/0/persistentVolumeClaim"
    if how == "json-replace":
        proc = as_tenant(cluster, "patch", "llmbackend", "probe", "-n", tenant, "--type=json", "-p",
                         json.dumps([{"op": "replace", "path": f"{pvc}/readOnly", "value": False}]))
    elif how == "json-remove":
        proc = as_tenant(cluster, "patch", "llmbackend", "probe", "-n", tenant, "--type=json", "-p",
                         json.dumps([{"op": "remove", "path": f"{pvc}/readOnly"}]))
    elif how == "json-add-second-volume":
        proc = as_tenant(cluster, "patch", "llmbackend", "probe", "-n", tenant, "--type=json", "-p", json.dumps([
            {"op": "add", "path": "/spec/serving/podTemplate/volumes/-",
             "value": {"name": "again", "persistentVolumeClaim": {"claimName": CLAIM}}}]))
    elif how == "merge-null":
        proc = as_tenant(cluster, "patch", "llmbackend", "probe", "-n", tenant, "--type=merge", "-p", json.dumps(
            {"spec": {"serving": {"podTemplate": {"volumes": [{"name": "data", "persistentVolumeClaim": {
                "claimName": CLAIM, "readOnly": None}}]}}}}))
    elif how == "merge-false":
        proc = as_tenant(cluster, "patch", "llmbackend", "probe", "-n", tenant, "--type=merge", "-p", json.dumps(
            {"spec": {"serving": {"podTemplate": {"volumes": [{"name": "data", "persistentVolumeClaim": {
                "claimName": CLAIM, "readOnly": False}}]}}}}))
    elif how == "apply-other-manager":
        proc = as_tenant(cluster, "apply", "--server-side", "--force-conflicts", "--field-manager=mallory", "-f", "-",
                         input=json.dumps(template(tenant, claim_volume(CLAIM, readOnly=False))))
    elif how == "replace-whole":
        for _ in range(10):  # a status write between the read and the replace is a Conflict: read again
            obj = cluster.kube.get("LLMBackend", tenant, "probe")
            obj["spec"]["serving"]["podTemplate"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] = False
            proc = as_tenant(cluster, "replace", "-f", "-", input=json.dumps(obj))
            if "Conflict" not in proc.stderr:
                break
    else:  # the same claim as the backend's cache: the download Job would write it
        proc = as_tenant(cluster, "patch", "llmbackend", "probe", "-n", tenant, "--type=merge", "-p", json.dumps(
            {"spec": {"model": {"source": {"cache": {"claimName": CLAIM}}}}}))
    assert refused_by_policy(proc), (how, proc.returncode, proc.stderr)
    assert _stored_read_only(cluster, tenant) is True
    assert not (cluster.kube.get("LLMBackend", tenant, "probe")["spec"]["model"]["source"].get("cache"))


def test_status_and_scale_subresources_are_not_the_tenants(cluster, tenant):
    _create_read_only(cluster, tenant)
    status = as_tenant(cluster, "patch", "llmbackend", "probe", "-n", tenant, "--subresource=status", "--type=merge",
                       "-p", json.dumps({"status": {"plan": {"tensorParallel": 8}}}))
    assert status.returncode != 0 and "forbidden" in status.stderr.lower(), status.stderr
    scale = as_tenant(cluster, "scale", "llmbackend", "probe", "-n", tenant, "--replicas=5")
    assert scale.returncode != 0 and "forbidden" in scale.stderr.lower(), scale.stderr


@pytest.mark.parametrize("what,spec", [
    ("source-pvc", {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": CLAIM}}}}),
    ("adapter-pvc", {"adapters": [{"name": "a", "source": {"pvc": {"claimName": CLAIM}}}]}),
    ("podtemplate-read-only", {"serving": {"podTemplate": claim_volume(CLAIM, readOnly=True)}}),
    ("cache-claim-read-only", {"serving": {"podTemplate": claim_volume("llmbackend-model-cache", readOnly=True)}}),
    ("cache-claim-writable", {"serving": {"podTemplate": claim_volume("llmbackend-model-cache")}}),
    ("adapter-cache-claim", {"adapters": [{"name": "a", "source": {"uri": "hf://org/a", "cache": {"claimName": CLAIM}}}]}),
    ("source-cache-claim", {"model": {"preset": "llama-3.1-8b", "source": {"uri": "s3://m/x", "cache": {"claimName": CLAIM}}}}),
    ("same-claim-twice", {"serving": {"podTemplate": {
        "volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": OTHER, "readOnly": True}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": True}}],
        "volumeMounts": [{"name": "a", "mountPath": "/a"}, {"name": "b", "mountPath": "/b"}]}}}),
    ("queue", {"scheduling": {"multiNode": {"queueName": "gold"}}}),
])
@pytest.mark.parametrize("seat", ["editor", "viewer"])
def test_a_viewer_or_editor_cannot_name_the_namespaces_claims_cache_or_queues(cluster, tenant, seat, what, spec):
    if seat == "viewer":
        grant(cluster, tenant, "view", cluster_role="view")
        wait_for(lambda: as_tenant(cluster, "auth", "can-i", "get", f"persistentvolumeclaim/{CLAIM}", "-n", tenant)
                 .stdout.strip() == "yes", timeout=20, what="view")
    if what == "same-claim-twice":
        use_claim(cluster, tenant, OTHER)  # `use` on one claim opens no other
    proc = dry_run(cluster, spec_with(tenant, **spec))
    assert refused_by_policy(proc), (seat, what, proc.stderr)


def test_use_on_a_claim_opens_its_read_only_mounts_and_nothing_it_writes(cluster, tenant):
    use_claim(cluster, tenant)
    for spec in ({"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": CLAIM, "path": "/m"}}}},
                 {"adapters": [{"name": "a", "source": {"pvc": {"claimName": CLAIM}}}]},
                 {"serving": {"podTemplate": claim_volume(CLAIM, readOnly=True)}}):
        proc = dry_run(cluster, spec_with(tenant, **spec))
        assert proc.returncode == 0, (spec, proc.stderr)
    both = {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": CLAIM}}},
            "serving": {"podTemplate": claim_volume(CLAIM)}}  # read-only as the source, writable as a volume
    assert refused_by_policy(dry_run(cluster, spec_with(tenant, **both)))


def test_the_operator_renders_what_was_admitted(cluster, operator, tenant):
    # A tenant with `use` on CLAIM mounts it read-only (the mount says writable), and as an adapter: the Deployment
    # the operator writes mounts CLAIM and the default cache, both read-only, and nothing else of the namespace.
    use_claim(cluster, tenant)
    manifest = template(tenant, {**claim_volume(CLAIM, readOnly=True), "volumeMounts": [
        {"name": "data", "mountPath": "/data", "readOnly": False}]},
        adapters=[{"name": "a", "source": {"pvc": {"claimName": CLAIM, "path": "/a"}}}])
    proc = as_tenant(cluster, "create", "-f", "-", input=json.dumps(manifest))
    assert proc.returncode == 0, proc.stderr
    deployment = wait_for(lambda: cluster.kube.get("Deployment", tenant, "probe"), timeout=90, what="the Deployment")
    pod = deployment["spec"]["template"]["spec"]
    claims = {v["name"]: v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v}
    assert {c["claimName"] for c in claims.values()} == {CLAIM, "llmbackend-model-cache"}
    assert all(c.get("readOnly") is True for c in claims.values()), claims
    for job in cluster.kube.list("Job", tenant):
        for volume in job["spec"]["template"]["spec"].get("volumes") or []:
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] == "llmbackend-model-cache", job["metadata"]["name"]


# ---- findings ----

@pytest.fixture
def queue_refused(cluster, tenant):
    """Precondition: the tenant may not use LocalQueue `gold`, so the policy refuses it as multiNode.queueName."""
    with precondition("multiNode.queueName gold is refused"):
        proc = dry_run(cluster, spec_with(tenant, scheduling={"multiNode": {"queueName": "gold"}}))
        assert refused_by_policy(proc), proc.stderr
    return tenant


# Fixed (attack2-1): any podTemplate label is a pod author's choice (policy podAuthorOnly: `create pods`).
@pytest.mark.parametrize("key", ["kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"])
def test_a_queue_named_by_a_pod_label_is_refused_as_queue_name_is(cluster, queue_refused, key):
    proc = dry_run(cluster, template(queue_refused, {"labels": {key: "gold"}}))
    assert refused_by_policy(proc), f"admitted: {key}: gold on the serving pods, no `use` asked"
    assert f"the pod labels {key} (podTemplate.labels)" in proc.stderr, proc.stderr


@pytest.fixture
def launcher_account(cluster, tenant):
    """What the operator writes for the tenant's multi-node TensorRT-LLM backend `llama` (render/multinode.py
    launcher_rbac, the launcher ClusterRole of manifests/default/rbac.yaml), and another team's pod `db-0` whose spec
    carries a password inline. Precondition: the tenant itself may not read that pod."""
    with precondition("the launcher account and db-0"):
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(launcher_cluster_role()))
        objects = launcher_rbac(BackendRef("llama", tenant, "uid"))
        for obj in objects:  # the same account and binding, owned by nobody (no backend to prune them here)
            obj["metadata"] = {"name": obj["metadata"]["name"], "namespace": tenant}
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
        cluster.kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0", "namespace": tenant},
                             "spec": {"containers": [{"name": "db", "image": "postgres:17",
                                                      "env": [{"name": "POSTGRES_PASSWORD", "value": "s3cret"}]}]}})
        assert as_tenant(cluster, "auth", "can-i", "get", "pod/db-0", "-n", tenant).stdout.strip() == "no"
        account = f"system:serviceaccount:{tenant}:{launcher_account_name(BackendRef('llama', tenant, 'uid'))}"
        wait_for(lambda: cluster.kubectl("auth", "can-i", "create", "pods", "--subresource=exec", "-n", tenant, "--as",
                                         account, check=False).stdout.strip() == "yes", timeout=20, what="the launcher binding")
    return account


# Fixed (was a strict xfail): FINDING attack2-2 (medium): the launcher token, mounted in the multi-node leader that
# runs the tenant's image, could get every pod of the namespace (launcher ClusterRole: pods get, no resourceNames),
# because `kubectl exec` reads the pod first. Leaders now exec with llmb-exec (launcher/main.go), which needs no read,
# and the role holds pods/exec only.
# The probe first sent the token beside the admin's client certificate (the API server authenticates the certificate
# first, so it read as the admin): it now sends the token alone.
def test_the_launcher_token_reads_no_pod_outside_its_group(cluster, launcher_account, tmp_path):
    tenant_ns = launcher_account.split(":")[2]
    token = cluster.kubectl("create", "token", launcher_account.split(":")[3], "-n", tenant_ns).stdout.strip()
    kubeconfig = tmp_path / "launcher.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": cluster.cluster.server,
                                               "certificate-authority": str(cluster.cluster.directory / "pki/ca.crt")}}],
        "users": [{"name": "u", "user": {"token": token}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    whoami = subprocess.run([cluster.kubectl_path, "--kubeconfig", str(kubeconfig), "auth", "whoami", "-o", "json"],
                            capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == launcher_account
    proc = subprocess.run([cluster.kubectl_path, "--kubeconfig", str(kubeconfig), "get", "pod", "db-0", "-n", tenant_ns,
                           "-o", "json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), (
        "the launcher token read db-0: " + ("POSTGRES_PASSWORD s3cret" if "s3cret" in proc.stdout else proc.stdout[:200]))


def test_a_spec_unchanged_update_by_the_tenant_changes_nothing_it_mounts(cluster, tenant):
    # An admin's backend mounts CLAIM writable; the tenant may relabel it (metadata only, not judged) but any spec
    # edit, even one that keeps every reference, is judged as a whole and refused.
    cluster.kubectl("create", "-f", "-", input=json.dumps(template(tenant, claim_volume(CLAIM), name="admins")))
    label = as_tenant(cluster, "label", "llmbackend", "admins", "-n", tenant, f"x={uuid.uuid4().hex[:6]}")
    assert label.returncode == 0, label.stderr
    edit = as_tenant(cluster, "patch", "llmbackend", "admins", "-n", tenant, "--type=merge", "-p",
                     json.dumps({"spec": {"replicas": 3}}))
    assert refused_by_policy(edit), edit.stderr
    assert cluster.kube.get("LLMBackend", tenant, "admins")["spec"]["replicas"] == 1


@pytest.fixture
def admins_backend(cluster, tenant):
    """An admin's backend that mounts CLAIM writable; the admin also grants the tenant the scale subresource (as one
    would for an autoscaler acting for the tenant). Precondition: a spec edit by the tenant is refused."""
    with precondition("the admin's backend"):
        cluster.kubectl("create", "-f", "-", input=json.dumps(template(tenant, claim_volume(CLAIM), name="admins")))
        grant(cluster, tenant, "scaler", [{"apiGroups": ["llmbackend.dev"], "resources": ["llmbackends/scale"],
                                           "verbs": ["get", "update", "patch"]}])
        edit = as_tenant(cluster, "patch", "llmbackend", "admins", "-n", tenant, "--type=merge", "-p",
                         json.dumps({"spec": {"replicas": 3}}))
        assert refused_by_policy(edit), edit.stderr
    return tenant


def test_the_scale_subresource_changes_only_replicas_and_is_not_judged(cluster, admins_backend):
    # attack2-4 (info), documented in docs/security.md ("Trust model", Not covered): the policy matches llmbackends,
    # not llmbackends/scale. Whoever holds the scale subresource changes spec.replicas alone, which names no object:
    # more replicas of pods whose references were judged when the admin wrote the spec, and nothing new named.
    before = cluster.kube.get("LLMBackend", admins_backend, "admins")["spec"]
    proc = as_tenant(cluster, "scale", "llmbackend", "admins", "-n", admins_backend, "--replicas=3")
    assert proc.returncode == 0, proc.stderr
    after = cluster.kube.get("LLMBackend", admins_backend, "admins")["spec"]
    assert after["replicas"] == 3
    assert {**after, "replicas": before["replicas"]} == before, "scale changed more than spec.replicas"


@pytest.fixture
def another_teams_service(cluster, tenant):
    """Another team's Service `db` of the namespace, selecting its pods by `app: db`; the tenant may not create pods
    (so it could never put one behind that Service itself)."""
    with precondition("Service db"):
        cluster.kube.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "namespace": tenant},
                             "spec": {"selector": {"app": "db"}, "ports": [{"port": 5432, "targetPort": 5432}]}})
        assert as_tenant(cluster, "auth", "can-i", "create", "pods", "-n", tenant).stdout.strip() == "no"
    return tenant


# Fixed (attack2-5): any podTemplate label is a pod author's choice (policy podAuthorOnly: `create pods`), so the
# tenant cannot put its pods (its image) behind another team's Service, NetworkPolicy or PDB by label.
def test_a_podtemplate_label_does_not_put_the_tenants_pods_behind_another_teams_service(cluster, another_teams_service):
    namespace = another_teams_service
    proc = as_tenant(cluster, "create", "-f", "-", input=json.dumps(template(namespace, {"labels": {"app": "db"}},
                                                                             name="hijack")))
    assert refused_by_policy(proc), f"admitted: the tenant's pods would carry app: db ({proc.stderr})"
    assert "the pod labels app (podTemplate.labels)" in proc.stderr, proc.stderr
    assert cluster.kube.get("LLMBackend", namespace, "hijack") is None


def test_the_api_server_takes_a_mount_path_alias_as_another_path(cluster, namespace):
    # Why the operator normalises mount paths itself (attack2-6, fixed in render/podtemplate.py; unit probe
    # tests/unit/test_refs_attack2.py): pod validation compares them as strings, so `/model-cache/.` next to
    # `/model-cache` is a second mount, not a duplicate.
    proc = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "alias", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox", "volumeMounts": [
            {"name": "a", "mountPath": "/model-cache", "readOnly": True}, {"name": "b", "mountPath": "/model-cache/."},
            {"name": "b", "mountPath": "//model-cache", "subPath": "x"}]}],
                 "volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]}}), check=False)
    assert proc.returncode == 0, proc.stderr
