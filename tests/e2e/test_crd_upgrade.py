"""A field added to the CRD with a default reaches backends stored before it: docs/upgrade.md says
spec.autoscaling.burstFloor is `auto` for existing backends after an upgrade, because the API server applies the
structural schema's defaults when it reads an object from etcd. Checked on the real API server with a copy of our CRD
under its own group (the shared cluster's CRD stays as it is)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml
from conftest import backend_manifest, wait_crd_established, wait_for

CRD = Path(__file__).resolve().parents[2] / "crds" / "llmbackend.yaml"
GROUP = "upgrade.llmbackend.dev"


def _crd(with_burst_floor: bool) -> dict:
    crd = copy.deepcopy(yaml.safe_load(CRD.read_text()))
    crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{GROUP}"
    crd["spec"]["group"] = GROUP
    crd["spec"].pop("conversion", None)
    for version in crd["spec"]["versions"]:
        autoscaling = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["autoscaling"]
        assert autoscaling["properties"]["burstFloor"]["default"] == "auto"
        if not with_burst_floor:  # the CRD of a version before the field
            del autoscaling["properties"]["burstFloor"]
            del autoscaling["default"]["burstFloor"]
    return crd


def test_a_backend_stored_before_burst_floor_reads_with_its_default(cluster, namespace):
    old, new = _crd(False), _crd(True)
    name = old["metadata"]["name"]
    cluster.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(old))
    try:
        wait_crd_established(cluster, name)
        backend = backend_manifest("stored", namespace, autoscaling={"enabled": True, "maxReplicas": 4})
        backend["apiVersion"] = f"{GROUP}/v1alpha1"
        # kubectl's discovery may lag a freshly established CRD ("no matches for kind"): try again
        wait_for(lambda: cluster.kubectl("apply", "-f", "-", input=json.dumps(backend), check=False).returncode == 0,
                 timeout=30, what="the backend applied under the old CRD")

        def stored() -> dict:
            out = cluster.kubectl("get", f"llmbackends.{GROUP}", "stored", "-n", namespace, "-o", "json").stdout
            return json.loads(out)["spec"]["autoscaling"]

        assert "burstFloor" not in stored()  # stored (and read) under the old schema: no such field
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(new))
        wait_crd_established(cluster, name)
        # not written since: the default comes from the new schema as the API server reads the stored object
        assert wait_for(lambda: stored().get("burstFloor"), timeout=30, what="burstFloor read with its default") == "auto"
        assert stored()["burstMemorySeconds"] == 0  # the old default, stored on create, stays
    finally:
        cluster.kubectl("delete", "crd", name, "--wait=true", check=False)
