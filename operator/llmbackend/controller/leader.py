"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

One replica holds the Lease and renews it; the others wait for it to expire. A leader that cannot
renew before the lease runs out exits the process (its pod restarts and competes again), so two
replicas never reconcile at once for longer than one lease duration.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from datetime import UTC, datetime

from . import permissions
from .kube import ApiError, Kube

log = logging.getLogger("llmbackend.leader")

LEASE_NAME = "llmbackend-operator"
# Only in the operator's own namespace (a Role there), and only its own Lease by name: other components' leader
# Leases are out of reach. `create` cannot be limited by name in RBAC.
permissions.require("coordination.k8s.io", "leases", "get", "update", scope=permissions.OWN, resource_names=(LEASE_NAME,))
permissions.require("coordination.k8s.io", "leases", "create", scope=permissions.OWN)


def _micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: str | None) -> float:
    if not value:
        return 0.0
    return datetime.strptime(value.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


class LeaderElector:
    def __init__(self, kube: Kube, name: str, namespace: str, identity: str | None = None,
                 lease_seconds: int = 15, renew_seconds: float = 5, exit=os._exit):
        self.kube = kube
        self.name = name
        self.namespace = namespace
        self.identity = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self._exit = exit
        self.leading = False
        self._released = threading.Event()

    def try_acquire_or_renew(self) -> bool:
        now = time.time()
        lease = self.kube.get("Lease", self.namespace, self.name)
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds, "renewTime": _micro_time(now)}
        try:
            if lease is None:
                spec["acquireTime"] = _micro_time(now)
                self.kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                  "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec})
                return True
            current = lease.get("spec", {})
            holder = current.get("holderIdentity")
            expires = _parse_time(current.get("renewTime")) + current.get("leaseDurationSeconds", self.lease_seconds)
            if holder != self.identity and holder and expires > now:
                return False
            spec["acquireTime"] = current.get("acquireTime") if holder == self.identity else _micro_time(now)
            spec["leaseTransitions"] = current.get("leaseTransitions", 0) + (0 if holder == self.identity else 1)
            lease["spec"] = spec
            # PUT with the read resourceVersion: of two contenders only one wins.
            self.kube.request("PUT", self.kube._path("Lease", self.namespace, self.name), body=lease)
            return True
        except ApiError as exc:
            if exc.status in (409, 422):
                return False
            raise

    def acquire(self) -> None:
        log.info("waiting to lead (lease %s/%s, identity %s)", self.namespace, self.name, self.identity)
        while True:
            try:
                if self.try_acquire_or_renew():
                    break
            except Exception as exc:  # noqa: BLE001 - API unavailable: keep trying
                log.warning("lease check failed: %s", exc)
            time.sleep(self.renew_seconds)
        self.leading = True
        log.info("leading as %s", self.identity)
        threading.Thread(target=self._renew_loop, name="lease-renew", daemon=True).start()

    def release(self) -> bool:
        """On a clean shutdown (SIGTERM): give the Lease up, so a standby takes over at its next try instead of after
        the lease duration (client-go's ReleaseOnCancel: no holder, a duration of 1 s). Only while we hold it."""
        if not self.leading:
            return False
        self._released.set()
        self.leading = False
        try:
            lease = self.kube.get("Lease", self.namespace, self.name)
            if lease is None or lease.get("spec", {}).get("holderIdentity") != self.identity:
                return False
            lease["spec"] = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1,
                             "renewTime": _micro_time(time.time())}
            self.kube.request("PUT", self.kube._path("Lease", self.namespace, self.name), body=lease)
            log.info("released the lease")
            return True
        except Exception as exc:  # noqa: BLE001 - the lease then expires as after a crash
            log.warning("could not release the lease (it expires in %ds): %s", self.lease_seconds, exc)
            return False

    def _renew_loop(self) -> None:
        last_renew = time.time()
        while True:
            if self._released.wait(self.renew_seconds):
                return
            try:
                if self.try_acquire_or_renew():
                    last_renew = time.time()
                    continue
                log.error("lost the lease to another replica; exiting")
            except Exception as exc:  # noqa: BLE001
                if time.time() - last_renew < self.lease_seconds - self.renew_seconds:
                    log.warning("lease renewal failed, retrying: %s", exc)
                    continue
                log.error("could not renew the lease in time (%s); exiting", exc)
            self.leading = False
            self._exit(1)
            return
