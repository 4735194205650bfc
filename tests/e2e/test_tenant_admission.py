"""manifests/default/admission-policy.yaml on the real API server: a tenant allowed to create LLMBackends names only
Secrets it may read and ServiceAccounts it may act as. The API server's own authorizer answers for the requesting user
(kubectl --as); the policy and binding are the shipped ones. The operator is not needed: admission decides alone.
"""

from __future__ import annotations

import copy
import time

import pytest
import yaml
from conftest import REPO_ROOT, backend_manifest

POLICY = REPO_ROOT / "manifests/default/admission-policy.yaml"
TENANT = "tenant-alice"


@pytest.fixture(scope="module")
def policy(cluster):
    cluster.kubectl("apply", "-f", str(POLICY))
    yield cluster
    cluster.kubectl("delete", "-f", str(POLICY), "--wait=false", check=False)


def rbac(namespace: str, name: str, rules: list[dict]) -> list[dict]:
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": name, "namespace": namespace}, "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": name, "namespace": namespace},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
             "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}]}]


def grant(cluster, namespace: str, name: str, rules: list[dict]) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac(namespace, name, rules)))


@pytest.fixture
def tenant_namespace(policy, namespace):
    """A namespace where TENANT may create and edit LLMBackends, and nothing else; two Secrets and a ServiceAccount."""
    grant(policy, namespace, "llmbackend-editor", [
        {"apiGroups": ["llmbackend.dev"], "resources": ["llmbackends"],
         "verbs": ["get", "list", "create", "update", "patch", "delete"]}])
    objects = [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": namespace},
                "stringData": {"HF_TOKEN": "hf_secret", "password": "s3cr3t"}} for secret in ("db-credentials", "hf-token")]
    objects.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer", "namespace": namespace}})
    policy.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    # The policy's admission plugin learns of new policies asynchronously: wait until it refuses the first case.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        proc = apply_as_tenant(policy, with_template(backend_manifest("probe", namespace),
                                                     {"envFrom": [{"secretRef": {"name": "db-credentials"}}]}))
        if proc.returncode != 0 and "llmbackend-tenant-references" in proc.stderr:
            break
        policy.kubectl("delete", "llmb", "probe", "-n", namespace, "--wait=false", check=False)
        time.sleep(0.5)
    else:
        raise AssertionError("the admission policy never took effect")
    return namespace


def apply_as_tenant(cluster, manifest: dict):
    return cluster.kubectl("apply", "--as", TENANT, "-f", "-", input=yaml.safe_dump(manifest), check=False)


def with_template(manifest: dict, template: dict) -> dict:
    manifest = copy.deepcopy(manifest)
    manifest["spec"]["serving"] = {"podTemplate": template}
    return manifest


SECRET_REFERENCES = {
    "volume": {"volumes": [{"name": "creds", "secret": {"secretName": "db-credentials"}}],
               "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
    "env-secretKeyRef": {"env": [{"name": "PASSWORD",
                                  "valueFrom": {"secretKeyRef": {"name": "db-credentials", "key": "password"}}}]},
    "envFrom": {"envFrom": [{"secretRef": {"name": "db-credentials"}}]},
    "imagePullSecrets": {"imagePullSecrets": [{"name": "db-credentials"}]},
    "csi-nodePublishSecretRef": {
        "volumes": [{"name": "vault", "csi": {"driver": "secrets-store.csi.k8s.io",
                                             "nodePublishSecretRef": {"name": "db-credentials"}}}]},
}


@pytest.mark.parametrize("case", sorted(SECRET_REFERENCES))
def test_a_secret_the_tenant_cannot_read_is_refused_then_allowed_once_readable(policy, tenant_namespace, case):
    manifest = with_template(backend_manifest("mounts", tenant_namespace), SECRET_REFERENCES[case])
    refused = apply_as_tenant(policy, manifest)
    assert refused.returncode != 0
    assert "names a Secret you may not read (it names: db-credentials)" in refused.stderr
    assert "kubectl auth can-i get secret/NAME" in refused.stderr
    grant(policy, tenant_namespace, "read-db-credentials", [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["db-credentials"], "verbs": ["get"]}])
    accepted = apply_as_tenant(policy, manifest)
    assert accepted.returncode == 0, accepted.stderr


def test_source_secret_ref_needs_read_access_to_that_secret(policy, tenant_namespace):
    manifest = backend_manifest("gated", tenant_namespace)
    manifest["spec"]["model"]["source"] = {"uri": "hf://meta-llama/Llama-3.1-8B", "secretRef": {"name": "hf-token"}}
    refused = apply_as_tenant(policy, manifest)
    assert refused.returncode != 0 and "you may not read (it names: hf-token)" in refused.stderr
    grant(policy, tenant_namespace, "read-hf-token", [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hf-token"], "verbs": ["get"]}])
    assert apply_as_tenant(policy, manifest).returncode == 0


def test_service_account_needs_the_right_to_act_as_it(policy, tenant_namespace):
    manifest = with_template(backend_manifest("runs-as", tenant_namespace), {"serviceAccountName": "deployer"})
    refused = apply_as_tenant(policy, manifest)
    assert refused.returncode != 0
    assert "serviceAccountName deployer: you may not act as this ServiceAccount" in refused.stderr
    grant(policy, tenant_namespace, "act-as-deployer", [
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "resourceNames": ["deployer"],
         "verbs": ["create"]}])
    assert apply_as_tenant(policy, manifest).returncode == 0


def test_backends_without_references_and_other_edits_pass(policy, tenant_namespace):
    plain = backend_manifest("plain", tenant_namespace)
    assert apply_as_tenant(policy, plain).returncode == 0
    # An admin may create a backend naming a Secret; the tenant can still edit its labels (spec unchanged)...
    admin_made = with_template(backend_manifest("admin-made", tenant_namespace), SECRET_REFERENCES["envFrom"])
    policy.kubectl("apply", "-f", "-", input=yaml.safe_dump(admin_made))
    labelled = policy.kubectl("label", "--as", TENANT, "llmb", "admin-made", "-n", tenant_namespace, "team=a",
                              check=False)
    assert labelled.returncode == 0, labelled.stderr
    # ...but not change its spec while it names a Secret the tenant may not read.
    edited = policy.kubectl("patch", "--as", TENANT, "llmb", "admin-made", "-n", tenant_namespace, "--type=merge",
                            "-p", '{"spec": {"replicas": 2}}', check=False)
    assert edited.returncode != 0 and "db-credentials" in edited.stderr
