"""spec.serving.podTemplate on the real control plane: the CRD's schema and CEL rules reject hostile templates,
the operator's pods carry an accepted one, and a template that collides with the operator's own settings is a
Degraded condition (InvalidPodTemplate) while nothing is applied."""

from __future__ import annotations

import pytest
import yaml
from conftest import apply_manifest, backend_manifest, condition, wait_for

# Applied as the cluster admin (a pod author): behind the admission policy, labels and annotations need `create pods`
# (tests/e2e/test_tenant_admission.py has the tenant's side).
TEMPLATE = {
    "labels": {"team": "search"},
    "annotations": {"example.com/owner": "search"},
    "imagePullSecrets": [{"name": "ngc-pull"}],
    "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
    "volumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca", "optional": True}}],
    "volumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
}


def test_the_pods_carry_the_template(cluster, operator, namespace):
    apply_manifest(cluster, backend_manifest("templated", namespace, serving={"podTemplate": TEMPLATE}))
    kube = cluster.kube
    pods = wait_for(lambda: kube.list("Pod", namespace, "llmbackend.dev/backend=templated,app.kubernetes.io/component=server"),
                    timeout=90, what="serving pods")
    for pod in pods:
        assert pod["metadata"]["labels"]["team"] == "search"
        assert pod["metadata"]["annotations"]["example.com/owner"] == "search"
        assert pod["spec"]["imagePullSecrets"] == [{"name": "ngc-pull"}]
        triton = pod["spec"]["containers"][0]
        assert {"name": "NCCL_DEBUG", "value": "WARN"} in triton["env"]
        assert {"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True} in triton["volumeMounts"]


def test_a_template_over_the_operators_settings_is_a_condition(cluster, operator, namespace):
    template = {"env": [{"name": "GPUS_PER_POD", "value": "8"}]}
    apply_manifest(cluster, backend_manifest("clash", namespace, serving={"podTemplate": template}))
    kube = cluster.kube
    obj = wait_for(lambda: (o := kube.get("LLMBackend", namespace, "clash"))
                   and (condition(o, "Degraded") or {}).get("reason") == "InvalidPodTemplate" and o,
                   timeout=60, what="Degraded InvalidPodTemplate")
    assert "GPUS_PER_POD" in condition(obj, "Degraded")["message"]
    assert kube.get("Deployment", namespace, "clash") is None, "nothing is applied"


@pytest.mark.parametrize("template,message", [
    ({"labels": {"llmbackend.dev/backend": "other"}}, "are the operator's"),
    ({"labels": {"job-name": "llmb-fetch-0123456789abcdef"}}, "are the operator's"),  # issue 42: a forged report
    ({"annotations": {"batch.kubernetes.io/controller-uid": "u"}}, "are the operator's"),
    ({"annotations": {"container.apparmor.security.beta.kubernetes.io/triton": "unconfined"}}, "security settings"),
    ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "unknown field \"spec.serving.podTemplate.volumes[0].hostPath\""),
    ({"volumes": [{"name": "none"}]}, "set exactly one of configMap, secret, persistentVolumeClaim, emptyDir, csi"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "other", "mountPath": "/other"}]},
     "must name a volume"),
    ({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "/a/../etc"}]},
     "must not contain '..' segments"),
    ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "Duplicate value"),
    ({"envFrom": [{"prefix": "X_"}]}, "set exactly one of configMapRef, secretRef"),
])
def test_hostile_templates_are_rejected_by_the_api_server(cluster, namespace, template, message):
    manifest = backend_manifest("hostile", namespace, serving={"podTemplate": template})
    result = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=False)
    assert result.returncode != 0, f"accepted: {template}"
    assert message in result.stderr, result.stderr
