"""manifests/default/admission-policy.yaml on the real API server: a tenant allowed to create LLMBackends names only
objects it could use itself (docs/security.md, "Trust model"): Secrets, ConfigMaps and read-only claims it may read,
ServiceAccounts it may act as; writable claims and inline CSI volumes only if it may create pods; classes and queues
it may use. The API server's own authorizer answers for the requesting user
(kubectl --as); the policy and binding are the shipped ones. The operator is not needed: admission decides alone.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
import yaml
from conftest import backend_manifest, user_rbac
from conftest import grant as grant_user

TENANT = "tenant-alice"


def grant(cluster, namespace: str, name: str, rules: list[dict]) -> None:
    grant_user(cluster, TENANT, namespace, name, rules)


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
    if case == "csi-nodePublishSecretRef":  # an inline CSI volume also needs `create pods` (its driver's attributes)
        assert accepted.returncode != 0 and "an inline CSI volume of driver" in accepted.stderr
        grant(policy, tenant_namespace, "pod-author", CREATE_PODS)
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


# Each class of reference the attacker found unchecked: (what the spec adds, the refusal's words, the grants in order;
# every grant but the last leaves it refused, the last one admits it).
CLAIM = "team-b-data"
CACHE = "llmbackend-model-cache"  # render/modelcache.py DEFAULT_CACHE_CLAIM: the namespace's model cache
CREATE_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]


def get_rule(resource: str, name: str, group: str = "", verb: str = "get") -> list[dict]:
    return [{"apiGroups": [group], "resources": [resource], "resourceNames": [name], "verbs": [verb]}]


# a read-only claim needs `use` by name (or create pods): `get`, which the built-in view role has on every claim,
# shows the claim object, not its files; so each read-only case grants get first and is still refused
USE_CLAIM = get_rule("persistentvolumeclaims", CLAIM, verb="use")


def claim_volume(claim: str, read_only: bool) -> dict:
    source = {"claimName": claim, "readOnly": True} if read_only else {"claimName": claim}
    return {"volumes": [{"name": "data", "persistentVolumeClaim": source}],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}


def set_path(manifest: dict, path: str, value) -> dict:
    manifest = copy.deepcopy(manifest)
    *parents, leaf = path.split(".")
    node = manifest["spec"]
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return manifest


def template(fields: dict):
    return lambda m: with_template(m, fields)


REFERENCES = {
    "pvc-volume-read-only": (template(claim_volume(CLAIM, True)), f"read-only claims: {CLAIM})",
                             [get_rule("persistentvolumeclaims", CLAIM), USE_CLAIM]),
    "pvc-volume-writable": (template(claim_volume(CLAIM, False)), f"the writable claim {CLAIM} (podTemplate volume data)",
                            [get_rule("persistentvolumeclaims", CLAIM), CREATE_PODS]),
    "cache-claim-writable": (template(claim_volume(CACHE, False)), f"the writable claim {CACHE}",
                             [get_rule("persistentvolumeclaims", CACHE), CREATE_PODS]),
    "cache-claim-read-only": (template(claim_volume(CACHE, True)), f"read-only claims: {CACHE})",
                              [get_rule("persistentvolumeclaims", CACHE),
                               get_rule("persistentvolumeclaims", CACHE, verb="use")]),
    "configmap-volume": (template({"volumes": [{"name": "cfg", "configMap": {"name": "team-b-config"}}]}),
                         "names a ConfigMap you may not read (it names: team-b-config)",
                         [get_rule("configmaps", "team-b-config")]),
    "configmap-env": (template({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "team-b-config",
                                                                                          "key": "x"}}}]}),
                      "names a ConfigMap you may not read (it names: team-b-config)",
                      [get_rule("configmaps", "team-b-config")]),
    "configmap-envFrom": (template({"envFrom": [{"configMapRef": {"name": "team-b-config"}}]}),
                          "names a ConfigMap you may not read (it names: team-b-config)",
                          [get_rule("configmaps", "team-b-config")]),
    "csi-inline": (template({"volumes": [{"name": "vault", "csi": {
                       "driver": "secrets-store.csi.k8s.io", "readOnly": True,
                       "volumeAttributes": {"secretProviderClass": "team-b-vault"}}}],
                             "volumeMounts": [{"name": "vault", "mountPath": "/vault"}]}),
                   "an inline CSI volume of driver secrets-store.csi.k8s.io (podTemplate volume vault)",
                   [get_rule("secretproviderclasses", "team-b-vault", "secrets-store.csi.x-k8s.io"), CREATE_PODS]),
    "source-pvc": (lambda m: set_path(m, "model.source", {"pvc": {"claimName": CLAIM}}), f"read-only claims: {CLAIM})",
                   [get_rule("persistentvolumeclaims", CLAIM), USE_CLAIM]),
    "source-cache-claim": (lambda m: set_path(m, "model.source.cache", {"claimName": CLAIM}),
                           f"the cache claim {CLAIM} (written by the download Job)",
                           [get_rule("persistentvolumeclaims", CLAIM), CREATE_PODS]),
    "adapter-pvc": (lambda m: set_path(m, "adapters", [{"name": "sql", "source": {"pvc": {"claimName": CLAIM}}}]),
                    f"read-only claims: {CLAIM})", [get_rule("persistentvolumeclaims", CLAIM), USE_CLAIM]),
    "adapter-secret": (lambda m: set_path(m, "adapters", [{"name": "sql", "source": {
                           "uri": "hf://team-b/sql-lora", "secretRef": {"name": "team-b-token"}}}]),
                       "you may not read (it names: team-b-token)", [get_rule("secrets", "team-b-token")]),
    "adapter-cache-claim": (lambda m: set_path(m, "adapters", [{"name": "sql", "source": {
                                "uri": "hf://team-b/sql-lora", "cache": {"claimName": CLAIM}}}]),
                            f"the cache claim {CLAIM} (written by the download Job of adapter sql)",
                            [get_rule("persistentvolumeclaims", CLAIM), CREATE_PODS]),
    "priority-class": (lambda m: set_path(m, "scheduling.priorityClassName", "team-b-critical"),
                       "priorityClassName team-b-critical: you may neither create pods here nor use",
                       [get_rule("priorityclasses", "team-b-critical", "scheduling.k8s.io", "use")]),
    "priority-class-as-pod-author": (lambda m: set_path(m, "scheduling.priorityClassName", "team-b-critical"),
                                     "priorityClassName team-b-critical", [CREATE_PODS]),
    "runtime-class": (template({"runtimeClassName": "kata"}), "runtimeClassName kata: you may neither",
                      [get_rule("runtimeclasses", "kata", "node.k8s.io", "use")]),
    "storage-class": (lambda m: set_path(m, "model.source.cache", {"storageClassName": "fast-ssd"}),
                      "storageClassName fast-ssd: you may neither create persistentvolumeclaims",
                      [get_rule("storageclasses", "fast-ssd", "storage.k8s.io", "use")]),
    "storage-class-as-claim-author": (lambda m: set_path(m, "model.source.cache", {"storageClassName": "fast-ssd"}),
                                      "storageClassName fast-ssd",
                                      [[{"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["create"]}]]),
    "queue": (lambda m: set_path(m, "scheduling.multiNode", {"queueName": "team-b-queue", "gangScheduler": "kueue"}),
              "queueName team-b-queue (gangScheduler kueue): you may neither",
              [get_rule("localqueues", "team-b-queue", "kueue.x-k8s.io", "use")]),
    # Labels and annotations are a pod author's choice whatever the key: a right on what one names is not enough
    # (attack2-1, attack2-5: a Service db's selector, a Kueue queue, a webhook's volume).
    "pod-labels": (template({"labels": {"app": "db"}}), "the pod labels app (podTemplate.labels)",
                   [get_rule("services", "db"), CREATE_PODS]),
    "pod-labels-kueue": (template({"labels": {"kueue.x-k8s.io/queue-name": "team-b-queue"}}),
                         "the pod labels kueue.x-k8s.io/queue-name (podTemplate.labels)",
                         [get_rule("localqueues", "team-b-queue", "kueue.x-k8s.io", "use"), CREATE_PODS]),
    "pod-annotations": (template({"annotations": {"sidecar.istio.io/userVolume": json.dumps(
                            [{"name": "b", "persistentVolumeClaim": {"claimName": CLAIM}}])}}),
                        "the pod annotations sidecar.istio.io/userVolume (podTemplate.annotations)",
                        [USE_CLAIM, CREATE_PODS]),
}


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_a_reference_is_refused_on_create_and_update_until_the_tenant_may_use_it(policy, tenant_namespace, case):
    add_reference, refusal, grants = REFERENCES[case]
    objects = [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": tenant_namespace},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}
               for claim in (CLAIM, CACHE)]
    objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "team-b-config", "namespace": tenant_namespace},
                    "data": {"x": "team b's"}})
    policy.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    existing = backend_manifest("existing", tenant_namespace)
    assert apply_as_tenant(policy, existing).returncode == 0
    create, update = add_reference(backend_manifest("new", tenant_namespace)), add_reference(existing)

    def refused() -> None:
        for manifest in (create, update):
            proc = apply_as_tenant(policy, manifest)
            assert proc.returncode != 0, f"{case}: {manifest['metadata']['name']} was admitted"
            assert refusal in proc.stderr, proc.stderr

    refused()
    for i, rules in enumerate(grants):
        grant(policy, tenant_namespace, f"grant-{i}", rules)
        if i < len(grants) - 1:
            refused()
    for manifest in (create, update):
        proc = apply_as_tenant(policy, manifest)
        assert proc.returncode == 0, f"{case}: {proc.stderr}"


def test_who_may_create_pods_may_name_anything_of_the_namespace(policy, tenant_namespace):
    """A pod author could mount all of it in a pod of their own: the LLMBackend gives them nothing more."""
    manifest = set_path(backend_manifest("pod-author", tenant_namespace), "model.source.cache", {"claimName": CLAIM})
    manifest = with_template(manifest, {
        "labels": {"app": "db"}, "annotations": {"sidecar.istio.io/inject": "false"},
        "serviceAccountName": "deployer", "runtimeClassName": "kata", "envFrom": [{"secretRef": {"name": "db-credentials"}},
                                                                                  {"configMapRef": {"name": "team-b-config"}}],
        "volumes": claim_volume(CACHE, False)["volumes"] + [{"name": "ro", "persistentVolumeClaim": {"claimName": CLAIM,
                                                                                                      "readOnly": True}}]})
    assert apply_as_tenant(policy, manifest).returncode != 0
    grant(policy, tenant_namespace, "pod-author", CREATE_PODS)
    accepted = apply_as_tenant(policy, manifest)
    assert accepted.returncode == 0, accepted.stderr


# PodSpec fields that name objects or reach the node, which the CRD does not have: the API server drops or refuses
# them, so no unlisted field can name an object (docs/security.md, "Trust model").
UNLISTED = {
    "ephemeral-volume": {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "dataSource": {"kind": "PersistentVolumeClaim", "name": CLAIM},
        "resources": {"requests": {"storage": "1Gi"}}}}}}]},
    "projected-volume": {"volumes": [{"name": "proj", "projected": {"sources": [
        {"secret": {"name": "db-credentials"}}, {"serviceAccountToken": {"path": "token"}}]}}]},
    "image-volume": {"volumes": [{"name": "img", "image": {"reference": "registry.example/team-b/weights:1"}}]},
    "node-fields": {"nodeName": "dgx-0", "schedulerName": "team-b", "hostNetwork": True,
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "team-b-gpu"}]},
    "privileged-and-host": {"hostPID": True, "hostIPC": True, "securityContext": {"runAsUser": 0, "privileged": True},
                            "containers": [{"name": "root", "image": "busybox", "securityContext": {"privileged": True}}],
                            "initContainers": [{"name": "root", "image": "busybox"}],
                            "serviceAccount": "deployer", "automountServiceAccountToken": True},
    "host-path-volume": {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]},
}


@pytest.mark.parametrize("case", sorted(UNLISTED))
def test_podspec_fields_the_crd_does_not_have_are_dropped_or_refused(policy, tenant_namespace, case):
    manifest = with_template(backend_manifest("unlisted", tenant_namespace), UNLISTED[case])
    proc = policy.kubectl("apply", "--as", TENANT, "--validate=false", "-f", "-", input=yaml.safe_dump(manifest),
                          check=False)
    if proc.returncode != 0:
        assert "set exactly one of" in proc.stderr, proc.stderr  # a volume with no source the CRD knows
        return
    stored = yaml.safe_load(policy.kubectl("get", "llmb", "unlisted", "-n", tenant_namespace, "-o", "yaml").stdout)
    template = stored["spec"].get("serving", {}).get("podTemplate", {})
    for key in UNLISTED[case]:
        assert key not in template or template[key] != UNLISTED[case][key]
    for volume in template.get("volumes", []):
        assert set(volume) <= {"name", "configMap", "secret", "persistentVolumeClaim", "emptyDir", "csi"}


@pytest.mark.parametrize("case", ["pvc-volume-read-only", "source-pvc"])
def test_a_viewer_of_the_namespace_cannot_read_another_team_s_claim_through_a_backend(policy, tenant_namespace, case):
    """A tenant bound to the built-in `view` role (it may read the claim object, not its files) names another team's
    claim: the serving pod, which runs the tenant's image, would mount it."""
    policy.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": CLAIM, "namespace": tenant_namespace},
         "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}},
        *user_rbac(TENANT, tenant_namespace, "viewer", cluster_role="view")]))
    can_read_files = policy.kubectl("auth", "can-i", "create", "pods", "--as", TENANT, "-n", tenant_namespace, check=False)
    assert can_read_files.stdout.strip() == "no"
    add_reference = REFERENCES[case][0]
    proc = apply_as_tenant(policy, add_reference(backend_manifest("viewer", tenant_namespace)))
    assert proc.returncode != 0, f"{case}: a viewer's backend mounts {CLAIM}"
