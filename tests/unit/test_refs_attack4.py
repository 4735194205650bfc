"""Issue 42, fourth attacker pass (independent): the fixes of the last hour, attacked with pure functions.

Seat: a tenant who may only create, update, patch and delete LLMBackends in its namespace (and, where a probe says so,
someone else in that namespace who may create pods but not exec into them). Targets: the uid-tagged accounts
(render/names.py) and the names the launcher admission policies strip; the group-name guard (controller/decide.py
groupnames.new_groups, groupnames.foreign_holder); podTemplate mounts under /model-cache; the download Job's identity
(render/modelcache.download_job_name) and the cache paths a URI becomes (model_fetch.parse_uri).

Convention: a probe that breaks a claim asserts the safe behaviour and is a strict expected failure whose reason starts
with FINDING and its severity; a broken precondition raises PreconditionError, which the xfail marks do not take.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from llmbackend import model_fetch as mf
from llmbackend.api.v1alpha1 import LLMBackendSpec, ModelSource, PlanStatus
from llmbackend.controller.groupnames import foreign_holder, new_groups
from llmbackend.render import modelcache as mc
from llmbackend.render.multinode import group_names
from llmbackend.render.names import BackendRef, launcher_account_name, owned_names, serving_account_name
from llmbackend.render.podtemplate import PodTemplateConflictError
from llmbackend.render.workloads import RolloutStrategy, desired_objects


class PreconditionError(Exception):
    """The scene of a probe could not be set (never the expected failure)."""


def precondition(ok: object, what: str) -> None:
    if not ok:
        raise PreconditionError(what)


# manifests/default/launcher-admission.yaml, as written there (RE2 and Python agree on these patterns).
BINDING_NAME = re.compile(r"^.+-launcher-[0-9a-f]{10}$")
EXEC_ACCOUNT_TAGGED = re.compile(r"-launcher-[0-9a-f]{10}$")


def _policy_backend(account: str) -> str:
    """The exec policy's variables.backend of an account name (the CEL there, in Python)."""
    if BINDING_NAME.search(account):
        return account[: len(account) - len("-launcher-") - 10]
    if account.endswith("-launcher"):
        return account[: -len("-launcher")]
    return ""


HOSTILE_NAMES = ["llama", "x-launcher", "a-launcher-0123456789", "b-serving", "c-launcher-launcher", "d-epp",
                 "e-launcher-abcdef0123-launcher"]


# ---- 1. the accounts ----

def test_account_names_carry_the_uid_tag_and_change_when_the_backend_is_created_again() -> None:
    """HOLDS: <name>-serving-<tag> / <name>-launcher-<tag>, tag = 10 hex of SHA-256 of the uid; a backend deleted and
    created again (new uid) gets accounts of other names, so a binding made for the old one is not the new one's."""
    first, again = BackendRef("llama", "team", "uid-1"), BackendRef("llama", "team", "uid-2")
    tag = hashlib.sha256(b"uid-1").hexdigest()[:10]
    assert serving_account_name(first) == f"llama-serving-{tag}"
    assert launcher_account_name(first) == f"llama-launcher-{tag}"
    assert serving_account_name(first) != serving_account_name(again)
    assert launcher_account_name(first) != launcher_account_name(again)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_no_account_the_operator_makes_is_another_backend_s_launcher_in_the_policies_eyes(name: str) -> None:
    """HOLDS: for hostile backend names, every ServiceAccount the operator may create for the backend is, to the exec
    policy, either no launcher at all or the launcher of this very backend; none is of the old form <x>-launcher
    (which the policy still honours), and the launcher binding's name passes the binding policy."""
    ref = BackendRef(name, "team", "uid-" + name)
    accounts = [n for kind, n in owned_names(ref) if kind == "ServiceAccount"]
    precondition(launcher_account_name(ref) in accounts, "the launcher account is one the operator owns")
    for account in accounts:
        assert not account.endswith("-launcher"), account
        tagged = bool(EXEC_ACCOUNT_TAGGED.search(account))
        assert tagged == (account == launcher_account_name(ref)), account
        if tagged:
            assert _policy_backend(account) == name
    assert BINDING_NAME.match(launcher_account_name(ref))


# ---- 4. group names ----

LWS_UID, LEADER_STS_UID = "lws-uid", "leader-sts-uid"


def _obj(kind: str, name: str, uid: str, controller: str | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    refs = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "llama", "uid": controller, "controller": True}] \
        if controller else []
    return {"kind": kind, "metadata": {"name": name, "uid": uid, "ownerReferences": refs, "labels": labels or {}}}


def _found(*objs: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    leaders = _obj("StatefulSet", "llama", LEADER_STS_UID, None)
    leaders["metadata"]["ownerReferences"] = [{"kind": "LeaderWorkerSet", "name": "llama", "uid": LWS_UID,
                                              "controller": True}]
    return {("StatefulSet", "llama"): leaders, **{(o["kind"], o["metadata"]["name"]): o for o in objs}}


LWS_LABELS = {"leaderworkerset.sigs.k8s.io/name": "llama", "leaderworkerset.sigs.k8s.io/group-index": "1",
              "leaderworkerset.sigs.k8s.io/worker-index": "0"}


def test_an_orphan_pod_with_the_group_s_name_and_labels_is_foreign() -> None:
    """HOLDS: someone who may create pods makes pod llama-1 (group 1's leader name) with the LWS labels and the
    launcher account, before the backend scales to 2 groups: it is named as the holder."""
    found = _found(_obj("Pod", "llama-1", "evil", None, LWS_LABELS))
    assert foreign_holder(found, "llama", group_names("llama", 1, 2), LWS_UID) == "Pod llama-1"


def test_a_leader_statefulset_that_is_not_the_leaderworkerset_s_makes_nothing_ours() -> None:
    """HOLDS: the chain's root is checked: a StatefulSet llama of another controller does not vouch for pods."""
    found = _found(_obj("Pod", "llama-1", "p", LEADER_STS_UID))
    found[("StatefulSet", "llama")]["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert foreign_holder(found, "llama", group_names("llama", 1, 2), LWS_UID) == "Pod llama-1"


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "FINDING (low): groupnames.foreign_holder trusts a controller ownerReference as proof that the LeaderWorkerSet's StatefulSet "
    "made the pod, but any pod creator may write one (the API server checks only blockOwnerDeletion, under "
    "OwnerReferencesPermissionEnforcement; without blockOwnerDeletion nothing). The StatefulSet llama's uid is on every "
    "leader pod (ownerReferences of llama-0). A pod creator who may not exec makes pod llama-1 with "
    "serviceAccountName <llama>-launcher-<tag>, the LWS labels and a controller reference to that uid: the guard "
    "calls group 1 free, the backend scales to 2, LWS makes StatefulSet llama-1 and workers llama-1-<i> for the "
    "impostor leader, whose bound token (pod-name llama-1) the exec policy lets into them. The docstring's own "
    "rule, 'labels prove nothing: anyone sets them', holds for ownerReferences too; the API server's uid check is "
    "the only proof. Caveat, not shown here (no StatefulSet controller in unit tests): while the StatefulSet has 1 "
    "replica it deletes a pod of ordinal 1 it takes for its own as condemned, so the impostor must be re-created in "
    "a loop and be there when the pass scales up; an orphan with the selector's labels made just after the look "
    "(TOCTOU) is adopted the same way, so the guard's protection rests on that race either way"))
def test_a_pod_with_a_forged_controller_reference_is_not_taken_for_the_group_s_leader() -> None:
    """BREAKS (pure): the forged pod carries the controller reference a pod creator can write."""
    forged = _obj("Pod", "llama-1", "evil", LEADER_STS_UID, LWS_LABELS)
    found = _found(forged)
    assert foreign_holder(found, "llama", group_names("llama", 1, 2), LWS_UID) == "Pod llama-1"


def _multinode_spec(**autoscaling: Any) -> LLMBackendSpec:
    return LLMBackendSpec.model_validate({
        "model": {"preset": "llama-3.1-405b", "source": {"pvc": {"claimName": "models", "path": "/m"}}},
        "replicas": 1, **({"autoscaling": autoscaling} if autoscaling else {})})


PLAN = PlanStatus(tensor_parallel=8, pipeline_parallel=2, gpus_per_replica=16, nodes_per_replica=2,
                  memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
REF = BackendRef("llama", "team", "uid-1")


def test_in_hpa_mode_every_group_up_to_max_replicas_is_looked_at_before_the_hpa_may_add_it() -> None:
    """HOLDS (as far as one pass goes): the HPA adds groups without the operator, so the guard looks at all of
    them up to maxReplicas now. (Between passes a pod creator may still make llama-3 after the look: see the report.)"""
    spec = _multinode_spec(enabled=True, mode="hpa", minReplicas=1, maxReplicas=4)
    live = {"metadata": {"uid": LWS_UID, "ownerReferences": [REF.owner_reference()]}, "spec": {"replicas": 1}}
    groups = new_groups(spec, REF.name, PLAN, live, 1)
    assert [g for g, _ in groups] == [1, 2, 3]
    assert ("Pod", "llama-3-1") in groups[-1][1] and ("StatefulSet", "llama-3") in groups[-1][1]


# ---- 3. mounts under /model-cache ----

URI_SPEC: dict[str, Any] = {"model": {"preset": "llama-3.1-8b", "source": {"uri": "hf://org/name"}}}


@pytest.mark.parametrize("path", ["/model-cache", "/model-cache/", "//model-cache", "/./model-cache/x",
                                  "/model-cache/hf/org/name/refs/main", "/model-cache/.", "/x/../model-cache/y",
                                  "/model-cache//hf", "/model-cache/hf/../hf/org"])
def test_a_pod_template_mount_that_resolves_under_the_cache_is_refused(path: str) -> None:
    """HOLDS: every spelling of a path at or under /model-cache is refused (a mount there could shadow the copy the
    server loads, or the marker the init container waits for)."""
    spec = dict(URI_SPEC, serving={"podTemplate": {"volumes": [{"name": "x", "emptyDir": {}}],
                                                    "volumeMounts": [{"name": "x", "mountPath": path}]}})
    try:
        parsed = LLMBackendSpec.model_validate(spec)
    except ValueError:
        return  # the schema refuses it: as good
    plan = PlanStatus(tensor_parallel=1, pipeline_parallel=1, gpus_per_replica=1, nodes_per_replica=1,
                      memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
    with pytest.raises(PodTemplateConflictError):
        desired_objects(REF, parsed, plan, 1, RolloutStrategy("RollingUpdate", 1, 0))


# ---- 2. the download Job's identity and the paths a URI becomes ----

def _source(**fields: Any) -> ModelSource:
    return ModelSource.model_validate(fields)


def test_a_backend_without_the_secret_never_gets_the_job_name_of_one_with_it() -> None:
    """HOLDS: whatever endpoint, region or claim the tenant writes, its Job (no Secret) is never named as team A's
    (secretRef team-a-hf): the parts are joined with newlines, which no field may hold."""
    team_a = _source(uri="s3://bucket/llama", secretRef={"name": "team-a-hf"}, region="us-east-1")
    a_name = mc.download_job_name(team_a)
    tries = [_source(uri="s3://bucket/llama", region="us-east-1"),
             _source(uri="s3://bucket/llama", endpoint="https://s3.amazonaws.com", region="us-east-1"),
             _source(uri="s3://bucket/llama/", region="us-east-1")]
    for other in tries:
        assert mc.download_job_name(other) != a_name
    for bad in ("us-east-1\nsecretRef=team-a-hf", "us-east-1\n"):
        with pytest.raises(ValueError):
            _source(uri="s3://bucket/llama", region=bad)
    with pytest.raises(ValueError):
        _source(uri="s3://bucket/llama", endpoint="https://e\nsecretRef=team-a-hf", region="us-east-1")


@pytest.mark.parametrize("uri", ["hf://org/name@..", "hf://org/name@.", "hf://org/name@a/../b", "hf://org/name@a..b",
                                 "hf://org/name@refs%2F..%2F..", "hf://org/name@-", "s3://bucket/../x",
                                 "s3://bucket/a/./b", "hf://org/../name"])
def test_a_uri_cannot_make_the_ref_link_or_its_sub_path_leave_the_source_s_directory(uri: str) -> None:
    """HOLDS: the serving pods' subPath is <key>/refs/<revision>; a revision or prefix with a '..' or '.' segment (or
    an encoded one) is refused by the program's parser before it becomes a path, whatever the API server allowed."""
    try:
        src = mf.parse_uri(uri)
    except mf.FetchError:
        return
    path = f"{src.key}/refs/{src.requested}"
    parts = path.split("/")
    assert ".." not in parts and "." not in parts and "" not in parts, path
    assert "%" not in path or "/" not in src.requested
