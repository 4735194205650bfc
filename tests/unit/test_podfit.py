"""Could the kube-scheduler place a pod on a node of the GPU pool (planning/podfit.py, quantity.py)? Table-driven
against the upstream semantics each function's docstring cites (k8s.io/kubernetes v1.36)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest
from cpu_probe import quiet_cpu_s

from llmbackend.planning import quantity
from llmbackend.planning.inventory import parse_node
from llmbackend.planning.podfit import affinity_matches, failures, pod_requests, tolerates, unplaceable

GIB, TIB = 2**30, 2**40


def node(name="dgx-0", gpus=8, cpu="224", memory="2Ti", storage="3Ti", pods="110", labels=None, taints=None,
         cordoned=False, **extra):
    allocatable = {"nvidia.com/gpu": str(gpus), **extra}
    for key, value in (("cpu", cpu), ("memory", memory), ("ephemeral-storage", storage), ("pods", pods)):
        if value is not None:
            allocatable[key] = value
    parsed = parse_node({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": cordoned},
        "status": {"allocatable": allocatable}})
    assert parsed is not None
    return parsed


def container(requests=None, limits=None, **kw):
    return {"name": "c", "resources": {**({"requests": requests} if requests else {}),
                                       **({"limits": limits} if limits else {})}, **kw}


@pytest.mark.parametrize("text, exact", [
    ("2Ti", Fraction(2 * TIB)), ("100Ti", Fraction(100 * TIB)), ("500m", Fraction(1, 2)), ("1.5Gi", Fraction(3 * GIB, 2)),
    ("1e3", Fraction(1000)), ("1E", Fraction(10**18)), ("2k", Fraction(2000)), ("0.1", Fraction(1, 10)),
    ("8", Fraction(8)), (8, Fraction(8)), (".5", Fraction(1, 2)), ("12Mi", Fraction(12 * 2**20)),
    ("lots", None), ("1 Gi", None), ("1KB", None), (True, None),
])
def test_quantities_parse_as_the_api_server_reads_them(text, exact):
    assert quantity.parse(text) == exact


@pytest.mark.parametrize("resource, value, units", [
    ("cpu", "500m", 500), ("cpu", "2", 2000), ("cpu", "0.0001", 1),  # millicores, rounded up
    ("memory", "1.5Gi", 3 * GIB // 2), ("memory", "0.5", 1),         # whole bytes, rounded up
    ("nvidia.com/gpu", "8", 8),
])
def test_scheduler_units_round_up_as_quantity_value_and_milli_value_do(resource, value, units):
    assert quantity.scheduler_units(resource, value) == units


def test_the_inventory_keeps_each_nodes_allocatable_in_scheduler_units():
    n = node(cpu="223500m", memory="2Ti", **{"hugepages-1Gi": "16Gi"})
    assert dict(n.allocatable) == {"cpu": 223500, "memory": 2 * TIB, "ephemeral-storage": 3 * TIB, "pods": 110,
                                   "nvidia.com/gpu": 8, "hugepages-1Gi": 16 * GIB}
    assert "cpu" not in dict(node(cpu="lots").allocatable), "not a quantity: left out, so not judged"


@pytest.mark.parametrize("pod, expected", [
    # containers run together: their requests add up; a limit without a request is the request (SetDefaults_Pod)
    ({"containers": [container({"cpu": "2", "memory": "8Gi"}), container(limits={"cpu": "1", "memory": "1Gi"})]},
     {"cpu": 3000, "memory": 9 * GIB}),
    # an explicit request wins over the limit
    ({"containers": [container({"memory": "1Gi"}, {"memory": "4Gi"})]}, {"memory": GIB}),
    # init containers run one at a time, before: the pod needs the larger of their peak and the containers' sum
    ({"containers": [container({"cpu": "2", "memory": "1G"}), container({"cpu": "1", "memory": "1G"})],
      "initContainers": [container({"cpu": "2", "memory": "1G"}), container({"cpu": "2", "memory": "3G"})]},
     {"cpu": 3000, "memory": 3 * 10**9}),
    # a sidecar (restartable init container) runs beside the containers and beside every init container after it
    ({"containers": [container({"cpu": "1"})],
      "initContainers": [container({"cpu": "3"}), container({"cpu": "1"}, restartPolicy="Always"),
                         container({"cpu": "3"})]},
     {"cpu": 4000}),
    # pod-level requests replace cpu and memory; overhead (a RuntimeClass's) adds
    ({"containers": [container({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"})],
      "resources": {"requests": {"memory": "10Gi"}}, "overhead": {"cpu": "250m"}},
     {"cpu": 1250, "memory": 10 * GIB, "nvidia.com/gpu": 2}),
    # names NodeResourcesFit does not compare, and zero requests, are left out
    ({"containers": [container({"cpu": "0", "storage": "1Ti", "pods": "3", "example.com/nic": "1",
                                "hugepages-2Mi": "1Gi"})]},
     {"example.com/nic": 1, "hugepages-2Mi": GIB}),
])
def test_pod_requests_as_the_scheduler_computes_them(pod, expected):
    assert pod_requests(pod) == expected


@pytest.mark.parametrize("toleration, taint, expected", [
    ({"key": "gpu", "operator": "Exists"}, ("gpu", "x", "NoSchedule"), True),
    ({"operator": "Exists"}, ("anything", "x", "NoExecute"), True),                 # empty key + Exists: all
    ({"key": "gpu", "value": "x"}, ("gpu", "x", "NoSchedule"), True),               # operator defaults to Equal
    ({"key": "gpu", "operator": "Equal", "value": "y"}, ("gpu", "x", "NoSchedule"), False),
    ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, ("gpu", "x", "NoSchedule"), False),
    ({"key": "other", "operator": "Exists"}, ("gpu", "x", "NoSchedule"), False),
    ({"key": "tier", "operator": "Gt", "value": "2"}, ("tier", "3", "NoSchedule"), True),   # taint 3 > 2
    ({"key": "tier", "operator": "Lt", "value": "2"}, ("tier", "3", "NoSchedule"), False),
    ({"key": "tier", "operator": "Gt", "value": "2"}, ("tier", "high", "NoSchedule"), False),
    ({"key": "gpu", "operator": "Bogus"}, ("gpu", "", "NoSchedule"), False),
])
def test_a_toleration_tolerates_a_taint_as_toleration_go_says(toleration, taint, expected):
    assert tolerates(toleration, *taint) is expected


LABELS = {"zone": "a", "tier": "3"}


def term(*expressions, fields=()):
    return {"matchExpressions": list(expressions), "matchFields": list(fields)}


@pytest.mark.parametrize("pod, expected", [
    ({}, True),
    ({"nodeSelector": {"zone": "a"}}, True),
    ({"nodeSelector": {"zone": "b"}}, False),
    ({"nodeSelector": {"missing": "a"}}, False),
    ({"terms": [term({"key": "zone", "operator": "In", "values": ["a", "b"]})]}, True),
    ({"terms": [term({"key": "zone", "operator": "NotIn", "values": ["a"]})]}, False),
    ({"terms": [term({"key": "missing", "operator": "NotIn", "values": ["a"]})]}, True),   # absent: not in
    ({"terms": [term({"key": "zone", "operator": "Exists"})]}, True),
    ({"terms": [term({"key": "zone", "operator": "DoesNotExist"})]}, False),
    ({"terms": [term({"key": "tier", "operator": "Gt", "values": ["2"]})]}, True),
    ({"terms": [term({"key": "tier", "operator": "Lt", "values": ["2"]})]}, False),
    ({"terms": [term({"key": "zone", "operator": "Gt", "values": ["2"]})]}, False),      # "a" is no integer
    ({"terms": [term({"key": "tier", "operator": "Gt", "values": ["2", "3"]})]}, False),  # invalid: one value
    ({"terms": [term({"key": "zone", "operator": "In", "values": []})]}, False),          # invalid: no value
    # terms are ORed, a term's expressions ANDed; an empty term matches nothing
    ({"terms": [term({"key": "zone", "operator": "In", "values": ["b"]}),
                term({"key": "tier", "operator": "Exists"})]}, True),
    ({"terms": [term({"key": "zone", "operator": "In", "values": ["a"]},
                     {"key": "tier", "operator": "DoesNotExist"})]}, False),
    ({"terms": [term()]}, False),
    ({"terms": []}, False),
    ({"terms": [term(fields=[{"key": "metadata.name", "operator": "In", "values": ["dgx-0"]}])]}, True),
    ({"terms": [term(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["dgx-0"]}])]}, False),
    # nodeSelector and the affinity must both match
    ({"nodeSelector": {"zone": "b"}, "terms": [term({"key": "zone", "operator": "Exists"})]}, False),
])
def test_node_affinity_matches_as_the_node_affinity_filter_does(pod, expected):
    spec = {k: v for k, v in pod.items() if k != "terms"}
    if "terms" in pod:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": pod["terms"]}}}
    assert affinity_matches(spec, node(labels=LABELS)) is expected


GPU_POD = {"containers": [container({"cpu": "16", "memory": "200Gi", "nvidia.com/gpu": "1"})],
           "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
           "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}


def with_resources(**requests):
    return {**GPU_POD, "containers": [container({**GPU_POD["containers"][0]["resources"]["requests"], **requests})]}


@pytest.mark.parametrize("pod, n, expected", [
    (GPU_POD, node(), []),
    (with_resources(memory="100Ti"), node(), ["Insufficient memory"]),
    (with_resources(memory="100Ti", cpu="300"), node(), ["Insufficient cpu", "Insufficient memory"]),
    (with_resources(**{"nvidia.com/gpu": "9"}), node(), ["Insufficient nvidia.com/gpu"]),
    (with_resources(**{"example.com/rdma": "1"}), node(), ["Insufficient example.com/rdma"]),  # not reported: 0
    (with_resources(**{"example.com/rdma": "1"}), node(**{"example.com/rdma": "4"}), []),
    (with_resources(**{"ephemeral-storage": "4Ti"}), node(), ["Insufficient ephemeral-storage"]),
    (GPU_POD, node(pods="0"), ["Too many pods"]),
    # a node that does not report cpu or memory is not judged on them (every kubelet reports them)
    (with_resources(memory="100Ti"), node(cpu=None, memory=None), []),
    # the first filter that refuses: a cordoned node, then taints, then affinity, then resources
    (with_resources(memory="100Ti"), node(cordoned=True), ["node(s) were unschedulable"]),
    (with_resources(memory="100Ti"), node(taints=[{"key": "maint", "effect": "NoExecute"}]),
     ["node(s) had untolerated taint {maint}"]),
    (GPU_POD, node(taints=[{"key": "maint", "value": "yes", "effect": "NoSchedule"}]),
     ["node(s) had untolerated taint {maint: yes}"]),
    (GPU_POD, node(taints=[{"key": "maint", "effect": "PreferNoSchedule"}]), []),  # a preference only
    (GPU_POD, node(taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]), []),
    ({**GPU_POD, "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100"}}, node(),
     ["node(s) didn't match Pod's node affinity/selector"]),
])
def test_failures_name_the_first_filter_that_refuses_the_node(pod, n, expected):
    assert failures(pod, pod_requests(pod), n) == expected


def test_a_cordoned_node_takes_a_pod_that_tolerates_the_unschedulable_taint():
    pod = {**GPU_POD, "tolerations": [*GPU_POD["tolerations"],
                                      {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}
    assert failures(pod, pod_requests(pod), node(cordoned=True)) == []


def test_unplaceable_says_why_as_the_scheduler_does_with_what_to_change():
    pool = [node("dgx-0"), node("dgx-1", memory="1Ti"), node("dgx-2", taints=[{"key": "maint", "effect": "NoSchedule"}])]
    assert unplaceable([("serving", GPU_POD)], pool) is None
    assert unplaceable([("serving", with_resources(memory="1.5Ti"))], pool) is None, "dgx-0 holds it"
    why = unplaceable([("serving", with_resources(memory="100Ti"))], pool)
    assert why == ("no node of the pool can hold a serving pod: 0/3 nodes are available: 2 Insufficient memory, "
                   "1 node(s) had untolerated taint {maint}; it requests memory 100Ti, the most a node of the pool "
                   "has is 2Ti")
    # a multi-node group: each role must fit somewhere
    why = unplaceable([("leader", GPU_POD), ("worker", with_resources(cpu="500"))], pool)
    assert why is not None and why.startswith("no node of the pool can hold a worker pod")
    assert why.endswith("it requests cpu 500, the most a node of the pool has is 224")
    assert unplaceable([("serving", with_resources(memory="100Ti"))], []) is None, "no nodes: nothing to judge"


def test_the_check_is_cheap_at_five_thousand_nodes():

    base = node()
    pool = [dataclasses.replace(base, name=f"dgx-{i}") for i in range(5000)]
    assert unplaceable([("serving", with_resources(memory="100Ti"))], pool) is not None
    assert quiet_cpu_s(lambda: unplaceable([("serving", with_resources(memory="100Ti"))], pool), runs=1) < 2.0  # the worst case: every node refuses (measured 0.04 s)


@pytest.mark.parametrize("resource, units, said", [
    ("cpu", 224000, "224"), ("cpu", 500, "500m"), ("cpu", 1000250, "1000.25"), ("cpu", 1500, "1.5"),
    ("memory", 2 * TIB, "2Ti"), ("memory", 100 * TIB, "100Ti"), ("memory", 3 * GIB // 2, "1.5Gi"), ("memory", 512, "512"),
    ("nvidia.com/gpu", 9, "9"),
])
def test_quantities_are_said_as_a_person_writes_them(resource, units, said):
    assert quantity.text(resource, units) == said


# --- one count of a pod's GPUs (podfit.pod_gpus, inventory.gpu_quantity): node allocatable, free GPUs, quota use -----


def _gpu_pod(containers=(), init=(), overhead=None, **spec) -> dict:
    """A Pod object whose containers request the GPUs given (a number: requests; ("limits", n): limits only;
    ("sidecar", n): a restartable init container)."""
    def container(value) -> dict:
        part, n = value if isinstance(value, tuple) and value[0] == "limits" else ("requests", value)
        return {"resources": {part: {"nvidia.com/gpu": n}}}
    inits = [{**container(v[1]), "restartPolicy": "Always"} if isinstance(v, tuple) and v[0] == "sidecar"
             else container(v) for v in init]
    body = {"containers": [container(v) for v in containers], "initContainers": inits, **spec}
    if overhead is not None:
        body["overhead"] = {"nvidia.com/gpu": overhead}
    return {"metadata": {"name": "p"}, "spec": body, "status": {"phase": "Running"}}


@pytest.mark.parametrize("value, gpus", [
    ("8", 8), (8, 8), ("1k", 1000), ("8.0", 8), ("2500m", 3), ("1500m", 2), ("1e3", 1000), ("0", 0),
    ("-2", 0), ("lots", 0), ("", 0), (None, 0), (True, 0)])
def test_gpu_quantity_reads_every_canonical_form_and_rounds_up(value, gpus):
    """The API server writes 1000 as "1k" (k8s.io/apimachinery resource.Quantity's canonical form); the scheduler
    rounds a fraction up (Quantity.Value). The old int(float()) read "1k" as 0 and "2500m" as 2."""
    from llmbackend.planning.inventory import gpu_quantity
    assert gpu_quantity(value) == gpus


@pytest.mark.parametrize("pod, gpus", [
    (_gpu_pod(["2", "1"]), 3),                                     # containers summed
    (_gpu_pod(["1k"]), 1000),                                      # canonical form
    (_gpu_pod(["1500m"]), 2),                                      # millis round up
    (_gpu_pod([("limits", "4")]), 4),                              # limits only: the API server defaults requests
    (_gpu_pod(["1"], init=["3"]), 3),                              # a plain init container's peak
    (_gpu_pod(["2"], init=["1", "1"]), 2),                         # init containers run one at a time: max, not sum
    (_gpu_pod(["1"], init=[("sidecar", "1")]), 2),                 # a sidecar runs beside the containers
    (_gpu_pod(["1"], init=[("sidecar", "1"), "2"]), 3),            # an init container after a sidecar: both at once
    (_gpu_pod(["1"], init=["2", ("sidecar", "1")]), 2),            # a sidecar started after it: not at once
    (_gpu_pod(["2"], overhead="1"), 3),                            # overhead added
    (_gpu_pod(["lots", "2"]), 2),                                  # not a quantity: counts as none
    (_gpu_pod([], resources={"requests": {"nvidia.com/gpu": "9"}}), 0),  # pod-level: cpu, memory, hugepages only
    ({"metadata": {"name": "p"}}, 0),
])
def test_pod_gpus_is_what_the_scheduler_reserves(pod, gpus):
    """component-helpers resource/helpers.go PodRequests, for nvidia.com/gpu: the larger of the containers' sum (plus
    sidecars) and the largest init container with the sidecars started before it, plus overhead."""
    from llmbackend.planning.podfit import pod_gpus
    assert pod_gpus(pod) == gpus


def test_free_gpus_and_a_quota_s_own_use_count_a_pod_the_same_way():
    """One count for both: decide.gpus_free (the GPUs free on a node) and the pool's quota use of a backend
    (autoscaling/pool.py live_pod_gpus) read a sidecar, a limits-only container and "1k" alike; a node's allocatable
    of "1k" reads as 1000 (it read as 0)."""
    from llmbackend.autoscaling.quota import live_pod_gpus
    from llmbackend.controller.decide import gpus_free
    big = node("big", gpus="1k")
    assert big.gpu_count == 1000
    pods = [_gpu_pod(["1"], init=[("sidecar", "1"), "3"]), _gpu_pod([("limits", "500m")]), _gpu_pod(["1k"])]
    for p in pods:
        p["spec"]["nodeName"] = "big"
    assert gpus_free(pods, [big]) == {"big": 0}
    assert live_pod_gpus(pods[:2]) == 5
    assert gpus_free(pods[:2], [big]) == {"big": 995}
