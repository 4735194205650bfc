"""The PodScheduled=False messages kube-scheduler writes on a serving pod that its volumes keep from a node, for
each Kubernetes minor version the project supports (docs/install.md: 1.30 and newer; tested on 1.36), with four
nodes. Fixtures for controller/pods.py's `unschedulable_problem`.

Read from kube-scheduler's source at each version's newest patch (k8s.io/kubernetes, pkg/scheduler):
- framework/plugins/volumebinding/volume_binding.go, VolumeBinding.PreFilter: "pod has unbound immediate
  PersistentVolumeClaims" when a claim of an Immediate StorageClass (or none) is Pending; podHasPVCs returns
  the claim lister's NotFound error, `persistentvolumeclaim "<name>" not found`, for a claim that does not exist.
- framework/types.go, FitError.Error: "0/<n> nodes are available:", the PreFilter message and ".", then the
  PostFilter plugins' message after a space.
- PostFilter: up to 1.33 only DefaultPreemption runs by default: "preemption: " and its own FitError, every node
  "Preemption is not helpful for scheduling" (framework/preemption/preemption.go). From 1.34 DynamicResources
  (DynamicResourceAllocation GA, on by default) runs before it (apis/config/v1/default_plugins.go); its PreFilter
  never ran, so its PostFilter's getStateData fails with the cycle state's ErrNotFound, "not found", an Error that
  ends the PostFilter phase (framework/runtime/framework.go, RunPostFilterPlugins).
The v1.36 messages were also seen on the local control plane (tests/e2e/test_status_truth.py).
"""

from __future__ import annotations

VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36")
_PREEMPTION = " preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
_DRA_STATE = " not found"


def _postfilter(version: str) -> str:
    return _PREEMPTION if version < "1.34" else _DRA_STATE


# A claim that is Pending (no StorageClass, no PersistentVolume): the Quick start's hf:// cache claim without a
# default StorageClass.
UNBOUND_IMMEDIATE = {v: "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims." + _postfilter(v)
                     for v in VERSIONS}
# A claim that does not exist: a pvc source's misspelt claimName.
CLAIM_NOT_FOUND = {v: '0/4 nodes are available: persistentvolumeclaim "llm-models" not found.' + _postfilter(v)
                   for v in VERSIONS}
