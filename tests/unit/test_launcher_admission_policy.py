"""manifests/default/launcher-admission.yaml names the launcher role and its accounts as the renderer does.

The policies spell the ClusterRole's name and the `-launcher` suffix as CEL string literals; if the code renamed
either, the policies would silently match nothing. They run on the real API server in
tests/e2e/test_launcher_admission.py.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from llmbackend.api.v1alpha1 import LAUNCHER_SUFFIX
from llmbackend.render.multinode import launcher_binding_name, launcher_rbac
from llmbackend.render.names import BackendRef

POLICIES = {d["metadata"]["name"]: d for d in
            yaml.safe_load_all((Path(__file__).resolve().parents[2] / "manifests/default/launcher-admission.yaml").read_text())
            if d["kind"] == "ValidatingAdmissionPolicy"}


def test_the_binding_policy_matches_the_rendered_launcher_binding():
    account, binding = launcher_rbac(BackendRef("llama", "serving", "uid"))
    match = POLICIES["llmbackend-launcher-binding"]["spec"]["matchConditions"][0]["expression"]
    assert f"object.roleRef.kind == '{binding['roleRef']['kind']}'" in match
    assert f"object.roleRef.name == '{binding['roleRef']['name']}'" in match
    rule = POLICIES["llmbackend-launcher-binding"]["spec"]["validations"][1]["expression"]
    assert f"endsWith('{LAUNCHER_SUFFIX}')" in rule
    # The rule: one subject, the ServiceAccount of the binding's own name and namespace.
    assert binding["metadata"]["name"] == account["metadata"]["name"] == launcher_binding_name("llama")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llama-launcher", "namespace": "serving"}]


def test_the_exec_policy_limits_the_accounts_the_renderer_names():
    match = POLICIES["llmbackend-launcher-exec"]["spec"]["matchConditions"][0]["expression"]
    assert f"request.userInfo.username.endsWith('{LAUNCHER_SUFFIX}')" in match
    assert launcher_binding_name("llama").endswith(LAUNCHER_SUFFIX)


def test_the_exec_policy_ties_the_account_to_its_backend_s_leaders():
    """Issue 42: the account <backend>-launcher, from a pod <backend>-<group> only (the renderer names the
    LeaderWorkerSet as the backend and the account <backend><LAUNCHER_SUFFIX>)."""
    variables = {v["name"]: v["expression"] for v in POLICIES["llmbackend-launcher-exec"]["spec"]["variables"]}
    assert f"size('{LAUNCHER_SUFFIX}')" in variables["backend"]
    assert "variables.leaderPod.startsWith(variables.backend + '-')" in variables["ownLeader"]
    rule, _container = POLICIES["llmbackend-launcher-exec"]["spec"]["validations"]
    assert "variables.ownLeader" in rule["expression"] and "^[1-9][0-9]*$" in rule["expression"]
    account, _ = launcher_rbac(BackendRef("llama", "serving", "uid"))
    assert account["metadata"]["name"].removesuffix(LAUNCHER_SUFFIX) == "llama"


def test_the_exec_policy_allows_the_serving_container_the_launch_scripts_name():
    """attack 42b: the launcher reaches the serving container only, not a sidecar; the name is a CEL literal."""
    from llmbackend.render.multinode import SERVING_CONTAINER, script_text

    _rule, container = POLICIES["llmbackend-launcher-exec"]["spec"]["validations"]
    assert container["expression"] == f"object.?container.orValue('') == '{SERVING_CONTAINER}'"
    assert '-c "${LAUNCH_CONTAINER:-' + SERVING_CONTAINER + '}"' in script_text("kubexec.sh")
