"""Autoscaling on Triton's queue-to-compute ratio.

* :mod:`.ratio` (pure): counters from ``/metrics`` text or the statistics API,
  and the windowed ratio Δqueue/Δcompute summed over pods (``RatioReading``).
* :mod:`.sources`: ``TritonScraper`` (async, scrapes each ready pod's metrics
  port, keeps a per-pod sample ring) and ``PrometheusRatioSource`` (reads the
  ``llmbackend:engine_queue_compute:ratio`` recording rule or a configured PromQL).
* :mod:`.decision` (pure): ``decide()`` — the HPA algorithm on the ratio, with
  tolerance, bounds, step limits, stabilization windows, a scale-down cooldown
  of one metrics window, an optional occupancy guard and a capacity cap;
  ``ScalerState`` is JSON-able. Its parts, by what they do: :mod:`.knobs` (the tuned constants, one
  ``DecisionKnobs`` passed to ``decide()``), :mod:`.engine`, :mod:`.forecast`, :mod:`.headroom`, :mod:`.state`,
  :mod:`.schedule`, :mod:`.panic`, :mod:`.outcome` (decision.py's docstring says which step each holds).
* ``mode: hpa``/``keda`` hand the loop to Kubernetes: their objects (HPA, PrometheusRule,
  prometheus-adapter rule, ScaledObject) are desired state, rendered in :mod:`llmbackend.render.hpa`
  and :mod:`llmbackend.render.keda`.
* :mod:`.metrics`: the operator's own Prometheus metrics.

The controller wires them: every ``syncPeriodSeconds`` it reads a
``RatioReading`` for the backend, calls ``decide()``, writes the workload's
replicas (the operator is the only writer when autoscaling is on) and reports
``status.autoscaling``.
"""
