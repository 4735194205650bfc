"""manifests/default/launcher-admission.yaml names the launcher role and its accounts as the renderer does.

The policies spell the ClusterRole's name and the account's form, <backend>-launcher-<tag>, as CEL string literals
and regular expressions; if the code renamed either, the policies would silently match nothing. They run on the real
API server in tests/e2e/test_launcher_admission.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from llmbackend.api.v1alpha1 import LAUNCHER_SUFFIX
from llmbackend.render.multinode import launcher_rbac
from llmbackend.render.names import ACCOUNT_TAG_LENGTH, BackendRef, launcher_account_name

POLICIES = {d["metadata"]["name"]: d for d in
            yaml.safe_load_all((Path(__file__).resolve().parents[2] / "manifests/default/launcher-admission.yaml").read_text())
            if d["kind"] == "ValidatingAdmissionPolicy"}
# The account's form as the policies write it (CEL's matches() is RE2 search, as Python's re.search).
ACCOUNT_RE = f"{LAUNCHER_SUFFIX}-[0-9a-f]{{{ACCOUNT_TAG_LENGTH}}}$"
REFS = [BackendRef("llama", "serving", uid) for uid in ("uid", "0b6c1a7e-4f3d-4c0a-9d1e-2f5a6b7c8d9e", "")]


def _strip_tag(account: str) -> str:
    """The exec policy's `backend` variable for a new-form account, in Python."""
    return account[:len(account) - len(f"{LAUNCHER_SUFFIX}-") - ACCOUNT_TAG_LENGTH]


def test_the_binding_policy_matches_the_rendered_launcher_binding():
    account, binding = launcher_rbac(REFS[0])
    match = POLICIES["llmbackend-launcher-binding"]["spec"]["matchConditions"][0]["expression"]
    assert f"object.roleRef.kind == '{binding['roleRef']['kind']}'" in match
    assert f"object.roleRef.name == '{binding['roleRef']['name']}'" in match
    rule = POLICIES["llmbackend-launcher-binding"]["spec"]["validations"][1]["expression"]
    assert f"object.metadata.name.matches('^.+{ACCOUNT_RE}')" in rule
    # The rule: one subject, the ServiceAccount of the binding's own name and namespace.
    assert binding["metadata"]["name"] == account["metadata"]["name"] == launcher_account_name(REFS[0])
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": launcher_account_name(REFS[0]),
                                    "namespace": "serving"}]


@pytest.mark.parametrize("ref", REFS)
def test_the_exec_policy_limits_the_accounts_the_renderer_names_and_the_earlier_ones(ref):
    match = POLICIES["llmbackend-launcher-exec"]["spec"]["matchConditions"][0]["expression"]
    assert f"request.userInfo.username.matches('{ACCOUNT_RE}')" in match
    assert f"request.userInfo.username.endsWith('{LAUNCHER_SUFFIX}')" in match  # accounts made before the tag
    assert re.search(ACCOUNT_RE, launcher_account_name(ref))


@pytest.mark.parametrize("ref", REFS)
def test_the_exec_policy_ties_the_account_to_its_backend_s_leaders(ref):
    """Issue 42: the account <backend>-launcher-<tag>, from a pod <backend>-<group> only (the renderer names the
    LeaderWorkerSet as the backend)."""
    variables = {v["name"]: v["expression"] for v in POLICIES["llmbackend-launcher-exec"]["spec"]["variables"]}
    assert f"variables.account.matches('^.+{ACCOUNT_RE}')" in variables["backend"]
    assert f"size(variables.account) - size('{LAUNCHER_SUFFIX}-') - {ACCOUNT_TAG_LENGTH})" in variables["backend"]
    assert "variables.leaderPod.startsWith(variables.backend + '-')" in variables["ownLeader"]
    rule, _container = POLICIES["llmbackend-launcher-exec"]["spec"]["validations"]
    assert "variables.ownLeader" in rule["expression"] and "^[1-9][0-9]*$" in rule["expression"]
    account, _ = launcher_rbac(ref)
    assert _strip_tag(account["metadata"]["name"]) == "llama"


def test_the_exec_policy_allows_the_serving_container_the_launch_scripts_name():
    """attack 42b: the launcher reaches the serving container only, not a sidecar; the name is a CEL literal."""
    from llmbackend.render.multinode import SERVING_CONTAINER, script_text

    _rule, container = POLICIES["llmbackend-launcher-exec"]["spec"]["validations"]
    assert container["expression"] == f"object.?container.orValue('') == '{SERVING_CONTAINER}'"
    assert '-c "${LAUNCH_CONTAINER:-' + SERVING_CONTAINER + '}"' in script_text("kubexec.sh")
