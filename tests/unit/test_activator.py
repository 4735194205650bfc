"""Scale to zero's activator: when it is rendered, how the backend's Service routes at zero and back, the pod it
runs, its wiring into decide(), and the parsing of the gauge the autoscaler reads for 0 -> 1."""

from __future__ import annotations

import argparse
import importlib

import pytest
from test_decide import MODEL, NODES, backend, first_pass, served

from llmbackend.api.engine_metrics import ACTIVATOR_HELD_METRIC
from llmbackend.api.v1alpha1 import LLMBackendSpec, PlanStatus
from llmbackend.autoscaling.activation import parse_held
from llmbackend.controller.decide import Observed, ScaleDecision, decide
from llmbackend.render import activator, openai, triton
from llmbackend.render.names import LWS_WORKER_INDEX_LABEL, BackendRef, activator_selector, owned_names, selector_for
from llmbackend.render.workloads import RolloutStrategy, desired_objects
from llmbackend.serving import activator as program

REF = BackendRef("llama", "serving", "uid-1")
RECREATE = RolloutStrategy("Recreate")
TO_ZERO = {"enabled": True, "minReplicas": 0, "maxReplicas": 2}


def _spec(autoscaling=None, **overrides) -> LLMBackendSpec:
    spec = {"model": {"preset": "llama-3.1-8b", "source": {"pvc": {"claimName": "models", "path": "/llama"}}}}
    if autoscaling is not None:
        spec["autoscaling"] = autoscaling
    spec.update(overrides)
    return LLMBackendSpec.model_validate(spec)


def _plan(nodes=1) -> PlanStatus:
    return PlanStatus(tensor_parallel=1, pipeline_parallel=nodes, gpus_per_replica=nodes, nodes_per_replica=nodes,
                      memory_per_gpu_bytes=60 << 30, gpu_product="NVIDIA-H100-80GB-HBM3", topology_source="annotation")


def _named(objects) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


@pytest.mark.parametrize("autoscaling, rendered", [
    (None, False),
    ({"enabled": False, "minReplicas": 0}, False),
    ({"enabled": True, "minReplicas": 1}, False),
    ({**TO_ZERO, "mode": "hpa"}, False),  # another controller owns replicas
    ({**TO_ZERO, "mode": "keda", "prometheus": {"url": "http://p:9090"}}, False),  # KEDA scales from zero itself
    (TO_ZERO, True),
])
def test_the_activator_is_rendered_only_for_the_operators_own_scale_to_zero(autoscaling, rendered):
    objects = _named(desired_objects(REF, _spec(autoscaling), _plan(), 1, RECREATE))
    assert (("Deployment", "llama-activator") in objects) is rendered
    assert (("Service", "llama-serving") in objects) is rendered
    if not rendered:
        assert objects[("Service", "llama")]["spec"]["selector"] == selector_for(REF)


@pytest.mark.parametrize("replicas, serving_ready, to_activator", [
    (0, False, True),
    (0, True, True),   # scaled to zero: the draining pods take no new requests
    (1, False, True),  # 0 -> 1 under way: the activator holds until a replica is Ready
    (1, True, False),
    (2, True, False),
])
def test_the_service_selects_the_activator_until_a_serving_pod_is_ready(replicas, serving_ready, to_activator):
    objects = _named(desired_objects(REF, _spec(TO_ZERO), _plan(), replicas, RECREATE, serving_ready=serving_ready))
    service, serving = objects[("Service", "llama")], objects[("Service", "llama-serving")]
    pod_labels = objects[("Deployment", "llama-activator")]["spec"]["template"]["metadata"]["labels"]
    server_labels = objects[("Deployment", "llama")]["spec"]["template"]["metadata"]["labels"]
    assert _matches(service["spec"]["selector"], pod_labels) is to_activator
    assert _matches(service["spec"]["selector"], server_labels) is not to_activator
    # The activator's upstream selects the serving pods only, always, on the same ports as the backend's Service.
    assert _matches(serving["spec"]["selector"], server_labels) and not _matches(serving["spec"]["selector"], pod_labels)
    assert serving["spec"]["ports"] == service["spec"]["ports"]


def test_the_activator_pod_overlaps_no_selector_of_the_serving_pods():
    objects = desired_objects(REF, _spec(TO_ZERO), _plan(), 2, RECREATE, serving_ready=True)
    pod_labels = _named(objects)[("Deployment", "llama-activator")]["spec"]["template"]["metadata"]["labels"]
    selectors = [o["spec"]["selector"].get("matchLabels", o["spec"]["selector"]) for o in objects
                 if o["metadata"]["name"] != "llama-activator" and "selector" in o.get("spec", {})]
    assert {o["kind"] for o in objects if "selector" in o.get("spec", {})} >= {"Deployment", "Service", "PodDisruptionBudget"}
    assert not any(_matches(s, pod_labels) for s in selectors), "the Deployment, PDB and Services leave it alone"
    assert _matches(activator_selector(REF), pod_labels)


def test_multi_node_serving_service_selects_leaders_only():
    objects = _named(desired_objects(REF, _spec(TO_ZERO), _plan(nodes=2), 1, RECREATE, serving_ready=True))
    assert objects[("Service", "llama-serving")]["spec"]["selector"][LWS_WORKER_INDEX_LABEL] == "0"
    assert objects[("Service", "llama")]["spec"]["selector"] == objects[("Service", "llama-serving")]["spec"]["selector"]


def test_the_hold_timeout_comes_from_the_spec():
    spec = _spec({**TO_ZERO, "holdTimeoutSeconds": 1800})
    container = _named(desired_objects(REF, spec, _plan(), 0, RECREATE))[("Deployment", "llama-activator")]
    assert _parse(container["spec"]["template"]["spec"]["containers"][0]["args"]).hold_timeout == 1800


@pytest.mark.parametrize("openai_on", [True, False])
def test_the_activator_pod_serves_the_service_ports_it_proxies_and_forwards_to_the_serving_service(openai_on):
    spec = _spec(TO_ZERO, serving={"openai": openai_on})
    objects = _named(desired_objects(REF, spec, _plan(), 0, RECREATE, operator_image="registry.example/op:1"))
    deployment = objects[("Deployment", "llama-activator")]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["metadata"]["ownerReferences"] == [REF.owner_reference()]
    assert set(objects) <= set(owned_names(REF)), "pruning looks the activator's children up by name"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example/op:1"
    assert container["command"][-1] == "llmbackend.serving.activator"
    importlib.import_module(container["command"][-1])
    # The program's own parser accepts the rendered arguments.
    parsed = _parse(container["args"])
    named_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service_ports = {p["targetPort"] for p in objects[("Service", "llama")]["spec"]["ports"]}
    proxied = {"http", openai.PORT_NAME} if openai_on else {"http"}
    assert set(named_ports) == proxied | {"metrics"} and set(named_ports) <= service_ports
    assert sorted(parsed.port) == sorted(named_ports[name] for name in proxied)
    assert parsed.metrics_port == named_ports["metrics"] == triton.METRICS_PORT
    assert parsed.upstream == "llama-serving.serving.svc"
    assert parsed.held_metric == ACTIVATOR_HELD_METRIC
    assert parsed.hold_timeout == spec.autoscaling.hold_timeout_seconds == 600
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
    assert container["securityContext"]["runAsNonRoot"] and not pod["automountServiceAccountToken"]
    assert "limits" in container["resources"] and "nvidia.com/gpu" not in container["resources"]["requests"]


def _parse(args: list[str]) -> argparse.Namespace:
    captured = {}

    class Stop(Exception):
        pass

    def fake_parse(self, argv=None, namespace=None):
        captured["ns"] = original(self, argv, namespace)
        raise Stop

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = fake_parse  # type: ignore[method-assign]
    try:
        with pytest.raises(Stop):
            program.main(args)
    finally:
        argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
    return captured["ns"]


# ---- decide(): routing flips with the pods, the autoscaler gets the activator's pods ----

SPEC = {"model": MODEL, "autoscaling": TO_ZERO}


def _service(decision, live=None) -> dict:
    applied = {(c["kind"], c["metadata"]["name"]): c for c in decision.apply}
    return (applied.get(("Service", "llama")) or live[("Service", "llama")])


def _pod(component: str, ready: bool) -> dict:
    return {"metadata": {"name": f"llama-{component}", "labels": {"llmbackend.dev/backend": "llama",
                                                                  "app.kubernetes.io/component": component}},
            "status": {"podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_decide_starts_at_zero_behind_the_activator_and_flips_once_a_replica_is_ready():
    created = first_pass(SPEC)
    applied = _named(created.apply)
    assert applied[("Deployment", "llama")]["spec"]["replicas"] == 0, "minReplicas 0: a new backend starts at 0"
    assert _matches(applied[("Service", "llama")]["spec"]["selector"], _pod("activator", True)["metadata"]["labels"])
    target = created.autoscale_target
    assert target is not None and target.current_replicas == 0
    assert target.activator_selector == "llmbackend.dev/backend=llama,app.kubernetes.io/component=activator"

    live = served(created, ready=0)
    scale = ScaleDecision(1, "ScaledFromZero", "1 request(s) waiting", None, None)
    starting = decide(Observed(backend(SPEC), NODES, children=live, scale_decision=scale, hpas=[],
                               pods=[_pod("activator", True), _pod("server", False)]))
    assert _named(starting.apply)[("Deployment", "llama")]["spec"]["replicas"] == 1
    assert ("Service", "llama") not in _named(starting.apply), "still the activator's until a replica is Ready"

    live = served(starting, ready=1) | {k: v for k, v in live.items() if k not in _named(starting.apply)}
    ready = decide(Observed(backend(SPEC), NODES, children=live, scale_decision=scale, hpas=[],
                            pods=[_pod("activator", True), _pod("server", True)]))
    assert _service(ready, live)["spec"]["selector"] == selector_for(BackendRef("llama", "serving", "u-1"))


def test_no_activator_selector_for_a_backend_that_does_not_scale_to_zero():
    created = first_pass({"model": MODEL, "autoscaling": {"enabled": True, "minReplicas": 1}})
    assert created.autoscale_target is not None and created.autoscale_target.activator_selector is None


# ---- the gauge ----

@pytest.mark.parametrize("text, held", [
    (f"# TYPE {ACTIVATOR_HELD_METRIC} gauge\n{ACTIVATOR_HELD_METRIC} 3\n{ACTIVATOR_HELD_METRIC}_timed_out_total 9\n", 3),
    (f'{ACTIVATOR_HELD_METRIC}{{port="8000"}} 2\n{ACTIVATOR_HELD_METRIC}{{port="9000"}} 1.0\n', 3),
    (f"{ACTIVATOR_HELD_METRIC} 0\n", 0),
    (f"{ACTIVATOR_HELD_METRIC}_timed_out_total 4\n", None),  # a longer name is not the gauge
    (f"{ACTIVATOR_HELD_METRIC} NaN\n", None),
    (f"{ACTIVATOR_HELD_METRIC} -1\n", None),
    (f"{ACTIVATOR_HELD_METRIC} lots\n", None),
    ("<html>not metrics</html>", None),
    ("", None),
])
def test_parse_held(text, held):
    assert parse_held(text) == held


def test_the_program_exports_the_gauge_under_the_name_the_operator_reads():
    running = program.Activator("127.0.0.1", 1, 10, ACTIVATOR_HELD_METRIC, 1 << 20, 8 << 20)
    assert running.held.enter() and running.held.enter()
    assert parse_held(running.metrics_text()) == 2
    running.held.leave("timeout")
    assert parse_held(running.metrics_text()) == 1


def test_a_backend_at_zero_says_where_requests_wait():
    created = first_pass(SPEC)
    available = created.conditions.get("Available")
    assert available["reason"] == "ScaledToZero" and "llama-activator" in available["message"], available


def test_the_rendered_memory_limit_covers_bodies_heads_and_connections():
    """The activator's limit is the baseline plus the body budget at the measured cost per body byte plus every
    connection it admits (proxied and metrics ports) with a head at the cap and its thread
    (tests/activator/test_activator_bodies.py and test_activator_headers.py measure the peak against it)."""
    objects = _named(desired_objects(REF, _spec(TO_ZERO), _plan(), 0, RECREATE))
    (container,) = objects[("Deployment", "llama-activator")]["spec"]["template"]["spec"]["containers"]
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi")
    heads = (activator.MAX_CONNECTIONS + activator.METRICS_CONNECTIONS) * activator.BYTES_PER_CONNECTION
    assert int(limit[:-2]) << 20 >= (activator.BASELINE_MEMORY_BYTES + heads
                                     + activator.BODY_BUDGET_BYTES * activator.BYTES_PER_BODY_BYTE)
    assert activator.BODY_BUDGET_BYTES >= activator.MAX_BODY_BYTES
    assert activator.BYTES_PER_CONNECTION > activator.MAX_HEADER_BYTES  # a head at the cap fits in a connection's share
    assert activator.MAX_CONNECTIONS >= activator.MAX_HELD  # every held request keeps its connection
    for arg in (f"--max-body-bytes={activator.MAX_BODY_BYTES}", f"--body-budget-bytes={activator.BODY_BUDGET_BYTES}",
                f"--max-header-bytes={activator.MAX_HEADER_BYTES}", f"--header-timeout={activator.HEADER_TIMEOUT_S}",
                f"--max-connections={activator.MAX_CONNECTIONS}",
                f"--max-metrics-connections={activator.METRICS_CONNECTIONS}"):
        assert arg in container["args"]
