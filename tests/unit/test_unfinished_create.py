"""A child created just as the API server went away (issue 44): the POST went through, the PATCH that marks the fields
sent as applied by the operator did not, and nothing did it again (the child kept `Update` managedFields after
convergence, so a later apply could not remove a field it no longer sets). The next pass in the namespace does it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s_client

from llmbackend.controller.kube import FIELD_MANAGER, Kube

SENT = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "1"}}
FIELDS = {"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {}}}


class ScriptedKube(Kube):
    """One ConfigMap on a pretend API server; the first managedFields PATCH finds the server gone."""

    def __init__(self) -> None:
        configuration = k8s_client.Configuration()
        configuration.host = "http://127.0.0.1:9"  # never contacted
        super().__init__(configuration)
        self.live: dict[str, Any] | None = None
        self.patches = 0
        self.down = True

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if method == "POST":
            self.live = {**copy.deepcopy(SENT), "metadata": {**SENT["metadata"], "uid": "u-1", "resourceVersion": "1",
                         "managedFields": [{"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": FIELDS}]}}
            return copy.deepcopy(self.live)
        if method == "GET":
            return copy.deepcopy(self.live)
        assert method == "PATCH" and self.live is not None
        if self.down:
            self.down = False
            raise urllib3.exceptions.ProtocolError("Connection aborted")
        self.patches += 1
        self.live["metadata"]["managedFields"] = kwargs["body"][1]["value"]
        self.live["metadata"]["resourceVersion"] = "2"
        return copy.deepcopy(self.live)


def test_fields_a_create_could_not_mark_as_applied_are_marked_by_the_next_pass():
    kube = ScriptedKube()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        kube.create_applied(SENT)
    assert kube.live is not None and kube.live["metadata"]["managedFields"][0]["operation"] == "Update"
    assert list(kube.unfinished_creates) == [("ConfigMap", "ns", "c")]

    kube.finish_creates("other-namespace")
    assert kube.patches == 0
    kube.finish_creates("ns")
    assert kube.patches == 1 and not kube.unfinished_creates
    (entry,) = kube.live["metadata"]["managedFields"]
    assert entry["manager"] == FIELD_MANAGER and entry["operation"] == "Apply"
    assert entry["fieldsV1"] == {"f:data": {".": {}, "f:a": {}}, "f:metadata": {}}  # what was sent: no labels


def test_an_unfinished_create_deleted_meanwhile_is_dropped():
    kube = ScriptedKube()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        kube.create_applied(SENT)
    kube.live = None  # deleted (e.g. garbage collected with its owner)
    kube.finish_creates("ns")
    assert kube.patches == 0 and not kube.unfinished_creates
