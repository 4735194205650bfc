"""The watch cache's index by backend label (controller/cache.Store): a pass lists each kind by its backend's label,
and the answer must be what a scan of every object gives, after any sequence of lists, updates and deletes."""

from __future__ import annotations

import random

from llmbackend.controller.cache import Store
from llmbackend.render.names import BACKEND_LABEL


def obj(ns: str, name: str, backend: str | None, version: int) -> dict:
    labels = {"x": "y"} if backend is None else {BACKEND_LABEL: backend, "x": "y"}
    return {"metadata": {"namespace": ns, "name": name, "labels": labels, "resourceVersion": str(version)}}


def scanned(store: Store, ns: str, selector: str) -> list[str]:
    wanted = dict(t.split("=") for t in selector.split(","))
    return sorted(o["metadata"]["name"] for (n, _), o in store.objects.items()
                  if n == ns and wanted.items() <= (o["metadata"].get("labels") or {}).items())


def test_the_index_answers_as_a_scan_after_random_changes():
    rng = random.Random(7)
    store = Store()
    store.replace("", [obj("a", f"o{i}", f"b{i % 3}", i) for i in range(10)])
    version = 100
    for _ in range(2000):
        version += 1
        ns, name = rng.choice("ab"), f"o{rng.randrange(12)}"
        step = rng.random()
        if step < 0.6:  # created, or relabelled to another backend or to none
            store.upsert(obj(ns, name, rng.choice(["b0", "b1", "b2", None]), version))
        elif step < 0.95:
            store.remove({"metadata": {"namespace": ns, "name": name}})
        else:
            store.replace(ns, [obj(ns, f"o{i}", f"b{i % 2}", version) for i in range(rng.randrange(5))])
        for backend in ("b0", "b1", "b2"):
            for selector in (f"{BACKEND_LABEL}={backend}", f"{BACKEND_LABEL}={backend},x=y", f"x=y,{BACKEND_LABEL}={backend}"):
                got = sorted(o["metadata"]["name"] for o in store.list(ns, selector))
                assert got == scanned(store, ns, selector), (ns, selector)
