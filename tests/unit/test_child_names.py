"""Child names of different backends cannot collide (issues 24 and 42).

Every name a backend causes to exist is enumerated here: what the operator creates (`owned_names`: <name>,
<name><suffix>, its accounts <name>-serving-<tag> and <name>-launcher-<tag> (tag: 10 hex digits of a hash of its
uid), the inspector Job) and what its LeaderWorkerSet's controller creates from the LWS's name
(`group_child_names`: StatefulSets <name> and <name>-<group>, pods <name>-<group> and <name>-<group>-<index>, the
headless Service <name>). The CRD's CEL rules refuse names ending with a child suffix (`coll-epp` next to `coll`)
and names ending in -<digits> (`llama-0`, the name of `llama`'s group 0). Names made with generateName (a
Deployment's ReplicaSets and pods, a Job's pods) are not fixed: the API server adds a random suffix and the
controller retries a taken one, so they cannot take a name from another backend. The tags are no help here: the
tests give every backend the same uid (the worst case, equal tags), so names alone must keep them apart.
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devcluster.cli import topology_nodes
from llmbackend.api import conditions as cond
from llmbackend.api import crdgen
from llmbackend.api.v1alpha1 import CHILD_NAME_SUFFIXES, LAUNCHER_SUFFIX, SERVING_SUFFIX, PVCSource
from llmbackend.controller.decide import Observed, decide
from llmbackend.planning.inventory import Inventory
from llmbackend.render import gateway
from llmbackend.render.modelcache import inspect_job_name
from llmbackend.render.multinode import group_child_names
from llmbackend.render.names import (
    ACCOUNT_TAG_LENGTH,
    BackendRef,
    account_tag,
    launcher_account_name,
    owned_names,
    serving_account_name,
)

GROUPS, GROUP_SIZE = 12, 12  # two-digit group and worker indexes too


@functools.cache
def _name_rules() -> list[dict[str, Any]]:
    rules = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    # The rules on the name alone (those that also read the spec compare adapters' names with it: test_adapters).
    return [r for r in rules if "self.metadata.name" in r["rule"] and "self.spec" not in r["rule"]]


def _cel_allows_new(name: str) -> bool:
    """The CRD's rules on metadata.name, as the API server evaluates them when a backend is created (no oldSelf):
    each is `[oldSelf.hasValue() || ]!self.metadata.name.matches('<re>')` or the DNS-1035 rule. CEL's matches()
    is RE2 search, as Python's re.search."""
    for rule in (r["rule"] for r in _name_rules()):
        if rule.startswith("self.metadata.name.size() <= 52"):
            if len(name) > 52 or not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
                return False
            continue
        refused = re.fullmatch(r"(oldSelf\.hasValue\(\) \|\| )?!self\.metadata\.name\.matches\('(.*)'\)", rule)
        assert refused, f"a name rule this test cannot read: {rule}"
        if re.search(refused.group(2), name):
            return False
    return True


UID = "uid"
TAG = account_tag(BackendRef("x", "ns", UID))


def child_names(backend: str, uid: str = UID) -> set[tuple[str, str]]:
    """Every (kind, name) a backend `backend` may cause to exist with a fixed name."""
    ref = BackendRef(backend, "ns", uid)
    names = set(owned_names(ref)) | set(group_child_names(backend, GROUPS, GROUP_SIZE))
    return names | {("Job", inspect_job_name(backend, PVCSource(claim_name="models", path="llama")))}


def test_every_child_name_is_the_backend_name_plus_a_suffix_or_group_indexes():
    for kind, name in child_names("coll"):
        rest = name.removeprefix("coll")
        assert (kind == "Job" and name.startswith("llmb-inspect-")) or rest == "" or rest in CHILD_NAME_SUFFIXES \
            or re.fullmatch(r"(-[0-9]+){1,2}", rest) \
            or (kind in ("ServiceAccount", "RoleBinding") and rest in (f"{SERVING_SUFFIX}-{TAG}", f"{LAUNCHER_SUFFIX}-{TAG}")), \
            (kind, name)


def test_no_suffix_ends_with_another_or_with_a_group_index():
    for a, b in itertools.permutations(CHILD_NAME_SUFFIXES, 2):
        assert not a.endswith(b), (a, b)
    assert not any(re.search(r"-[0-9]+$", s) for s in CHILD_NAME_SUFFIXES)


@pytest.mark.parametrize("name", ["coll-epp", "x-activator", "x-serving", "x-model-repo", "x-launcher",
                                  "llama-0", "llama-3", "x-10", "a-1-2", "llama-3-1"])
def test_names_a_child_of_another_backend_could_have_are_refused(name):
    assert not _cel_allows_new(name)


@pytest.mark.parametrize("name", ["coll", "epp", "x-epp2", "x-eppx", "llama3", "llama-3-8b", "llama-3b", "gpt-4o",
                                  "qwen2-5-7b", "a0"])
def test_other_names_are_allowed(name):
    assert _cel_allows_new(name)


def test_the_issue_42_pair_collided_before_and_one_of_them_is_refused_now():
    """`llama` (multi-node) and `llama-0` shared StatefulSet llama-0, and `llama`'s leader token reached pod llama-0-0."""
    assert ("StatefulSet", "llama-0") in child_names("llama") & child_names("llama-0")
    assert _cel_allows_new("llama") and not _cel_allows_new("llama-0")


def test_two_allowed_backends_never_share_a_child_name_exhaustive():
    """All names of up to three segments built from the suffixes' words and digits."""
    words = ["a", "0", "1", "10", "epp", "activator", "serving", "model", "repo", "launcher", TAG]
    names = ["-".join(p) for n in (1, 2, 3) for p in itertools.product(words, repeat=n)]
    owner: dict[tuple[str, str], str] = {}
    for backend in filter(_cel_allows_new, names):
        for child in child_names(backend):
            assert owner.setdefault(child, backend) == backend, (child, owner[child], backend)


SEGMENT = st.one_of(st.sampled_from(["epp", "launcher", "model", "repo", "serving", "activator", "0", "1", "12", TAG]),
                    st.from_regex(r"[a-z0-9]{1,3}", fullmatch=True))
NAME = st.lists(SEGMENT, min_size=1, max_size=5).map("-".join).filter(_cel_allows_new)


@settings(max_examples=400, deadline=None)
@given(NAME, NAME)
def test_two_allowed_backends_never_share_a_child_name(a, b):
    if a != b:
        assert not child_names(a) & child_names(b), (a, b)


@settings(max_examples=400, deadline=None)
@given(NAME, st.text(max_size=40), NAME, st.text(max_size=40))
def test_two_allowed_backends_never_share_a_child_name_whatever_their_uids(a, uid_a, b, uid_b):
    if a != b:
        assert not child_names(a, uid_a) & child_names(b, uid_b), (a, b)


def account_names(ref: BackendRef) -> set[str]:
    return {name for kind, name in owned_names(ref) if kind == "ServiceAccount"}


@pytest.mark.parametrize("name", ["ci", "llama", "serving", "victim"])
def test_the_accounts_are_fresh_for_every_incarnation_and_never_the_bare_suffix_names(name):
    """Issue 42 (attack3): an admin may have bound <x>-serving or <x>-launcher (RoleBinding, cloud workload identity)
    before a backend <x> exists, or bound the accounts of a backend that is then deleted and created again: the
    operator creates neither name, and a new uid makes new names."""
    first, again = BackendRef(name, "ns", "0b6c1a7e-1"), BackendRef(name, "ns", "0b6c1a7e-2")
    assert not account_names(first) & account_names(again) - {gateway.epp_name(name)}
    assert not {name + SERVING_SUFFIX, name + LAUNCHER_SUFFIX, name} & account_names(first)
    assert serving_account_name(first) == f"{name}{SERVING_SUFFIX}-{account_tag(first)}"
    assert launcher_account_name(first) == f"{name}{LAUNCHER_SUFFIX}-{account_tag(first)}"
    assert re.fullmatch(f"[0-9a-f]{{{ACCOUNT_TAG_LENGTH}}}", account_tag(first))


# ---- a backend stored before the rule ----

def _decide(name: str, preset: str) -> dict[str, tuple[str, str, str]]:
    inventory = Inventory()
    for node in topology_nodes("dgx-h100-x4"):
        inventory.upsert(node)
    obj = {"apiVersion": "llmbackend.dev/v1alpha1", "kind": "LLMBackend", "status": {},
           "metadata": {"name": name, "namespace": "serving", "uid": "u-1", "generation": 1},
           "spec": {"model": {"preset": preset, "source": {"pvc": {"claimName": "models", "path": "m"}}}}}
    observed = Observed(obj, inventory.nodes(), apis=frozenset({"LeaderWorkerSet"}))
    asked = decide(observed)
    decision = decide(Observed(obj, inventory.nodes(), apis=observed.apis, children={k: None for k in asked.look_up}))
    kinds = {o["kind"] for o in decision.apply}
    found = {c["type"]: (c["status"], c["reason"], c["message"]) for c in decision.conditions.to_list()}
    found["applied"] = ("", "", ",".join(sorted(kinds)))
    return found


def test_a_stored_multi_node_backend_named_like_a_group_gets_a_condition_and_no_leader_worker_set():
    found = _decide("llama-0", "llama-3.1-405b")
    status, reason, message = found["Degraded"]
    assert (status, reason) == ("True", cond.BACKEND_NAME_AMBIGUOUS)
    assert "group 0 of a multi-node backend llama" in message and "recreate" in message
    assert "LeaderWorkerSet" not in found["applied"][2]
    assert found["Available"][:2] == ("False", cond.BACKEND_NAME_AMBIGUOUS)


def test_a_stored_single_node_backend_named_like_a_group_is_served():
    """On one node its children are <name> and <name><suffix>, and Deployment pods carry a random suffix."""
    found = _decide("llama-3", "llama-3.1-8b")
    assert found["Degraded"][1] != cond.BACKEND_NAME_AMBIGUOUS
    assert "Deployment" in found["applied"][2]


@pytest.mark.parametrize("preset,nodes", [("llama-3.1-8b", 1), ("llama-3.1-405b", 2)])
def test_every_rendered_child_is_one_owned_names_enumerates(preset, nodes):
    """What the collision rules above know of: the serving pods' own ServiceAccount (`<name>-serving-<tag>`) and the
    launcher's included."""
    from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
    from llmbackend.render.workloads import RolloutStrategy, desired_objects

    ref = BackendRef("coll", "ns", "uid")
    spec = LLMBackendSpec.model_validate({"model": {"preset": preset, "source": {"pvc": {"claimName": "m"}}}})
    plan = PlanStatus(tensor_parallel=8, pipeline_parallel=nodes, gpus_per_replica=8 * nodes, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=1, gpu_product="NVIDIA-H100-80GB-HBM3")
    rendered = {(o["kind"], o["metadata"]["name"]) for o in desired_objects(ref, spec, plan, 2, RolloutStrategy("Recreate"))}
    assert ("ServiceAccount", serving_account_name(ref)) in rendered
    assert rendered <= set(owned_names(ref)), rendered - set(owned_names(ref))
