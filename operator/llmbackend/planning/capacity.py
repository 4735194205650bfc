"""What a plan's shape may use of the nodes: how many replicas they hold, which GPU pool (nodes of one product a
backend's pods may land on) it shares with other backends, and the nodes as the GPUs free now leave them. Pure;
decide.py asks, autoscaling/pool.py shares the pools."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .inventory import GPUNode
from .placement import eligible_groups, product_pool, product_pool_nodes, stage_slots
from .planner import Plan


def replicas_capacity(
    plan_: Plan,
    nodes: Iterable[GPUNode],
    node_selector: Mapping[str, str] | None = None,
    tolerations: Iterable[Any] | None = None,
) -> int:
    """How many whole replicas of this plan's shape the nodes could hold (ignoring other workloads)."""
    if not plan_.fits:
        return 0
    groups, _, _ = eligible_groups(nodes, node_selector, tolerations)
    tp, pp = plan_.tensor_parallel, plan_.pipeline_parallel
    total = 0
    for group in groups:
        if group.product != plan_.gpu_product:
            continue
        if plan_.spans_clique:
            total += stage_slots(group, tp) // pp
            continue
        k = plan_.stages_per_node
        # Each replica takes k stages on each of pp/k distinct nodes.
        chunks = [s.slots(tp)[0] // k for s in group.shapes.values() for _ in s.names]
        per_replica = pp // k
        lo, hi = 0, sum(chunks) // per_replica
        while lo < hi:  # largest R with sum(min(c, R)) >= R * per_replica
            mid = (lo + hi + 1) // 2
            if sum(min(c, mid) for c in chunks) >= mid * per_replica:
                lo = mid
            else:
                hi = mid - 1
        total += lo
    return total


def gpu_pool(plan_: Plan, nodes: Iterable[GPUNode], node_selector: Mapping[str, str] | None = None,
             tolerations: Iterable[Any] | None = None) -> tuple[str, int]:
    """(key, GPUs) of the nodes this plan's replicas may land on: backends with the same key share those GPUs
    (autoscaling/pool.py)."""
    if not plan_.fits or not plan_.gpu_product:
        return "", 0
    return product_pool(nodes, node_selector, tolerations, plan_.gpu_product)


def gpu_pool_nodes(plan_: Plan, nodes: Sequence[GPUNode], node_selector: Mapping[str, str] | None = None,
                   tolerations: Iterable[Any] | None = None) -> list[GPUNode]:
    """The nodes of ``gpu_pool``'s pool ([] when it has none)."""
    if not plan_.fits or not plan_.gpu_product:
        return []
    return product_pool_nodes(nodes, node_selector, tolerations, plan_.gpu_product)


def free_view(nodes: Iterable[GPUNode], free_gpus: Mapping[str, int]) -> list[GPUNode]:
    """The nodes as the GPUs free now leave them: each with only its free GPUs, taken as the first ones of its
    NVLink domains (exact on NVSwitch nodes, where one domain holds all; optimistic elsewhere); nodes with none
    free dropped."""
    out = []
    for node in nodes:
        free = min(free_gpus.get(node.name, node.gpu_count), node.gpu_count)
        if free <= 0:
            continue
        kept = tuple(d for d in (tuple(g for g in domain if g < free) for domain in node.nvlink_domains) if d)
        out.append(dataclasses.replace(node, gpu_count=free, nvlink_domains=kept))
    return out
