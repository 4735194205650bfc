# The two promised commands: `make demo` (main job on the local default) and `make test` (lint, then all tests).
VENV ?= .venv
PY := $(VENV)/bin/python
# The repository's own tools (dev/devcluster: control plane, demo, tritonserver launcher) are not in the package.
DEVTOOLS := PYTHONPATH=$(CURDIR)/dev$(if $(PYTHONPATH),:$(PYTHONPATH)) $(PY)
PIP_FLAGS ?= -q --disable-pip-version-check

.PHONY: setup demo lint test unit e2e controlplane controlplane-binaries tools prometheus openmpi moto crd chart docs bench down clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) -e '.[test]'
	touch $@

# Control-plane binaries (etcd, kube-apiserver, kubectl, kwok, ...) built once from the Go module proxy into
# ~/.cache/llmbackend: all that `make demo` needs. The build script uses the standard library only, so it runs on
# the system's python3 beside `setup` (`make demo`: the Go build is CPU, the virtualenv mostly downloads).
controlplane-binaries:
	PYTHONPATH=$(CURDIR)/dev python3 -m devcluster.build

controlplane: setup controlplane-binaries

# What the tests need besides: Argo CD's health evaluator (tests/argocd), the LWS controller and Helm (the chart tests).
tools: controlplane
	$(PY) tests/argocd/argocd_health.py
	$(DEVTOOLS) -m devcluster.lws
	$(DEVTOOLS) -m devcluster.helm

# Debian's Prometheus for the autoscaling tests (installed when missing and we are root; otherwise those tests skip).
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) || echo "prometheus not installed: the Prometheus-source tests will be skipped"; }

# Debian's Open MPI for the multi-node launch tests (tests/launch: the rendered leader scripts run real mpirun).
openmpi:
	@command -v mpirun >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openmpi-bin >/dev/null) || echo "openmpi-bin not installed: the multi-node launch tests will be skipped"; }

demo:
	$(MAKE) --no-print-directory -j2 setup controlplane-binaries
	$(DEVTOOLS) -m devcluster demo

# The import contract (.importlinter), ruff and mypy (configured in pyproject.toml), on this tree's sources.
lint: setup
	PYTHONPATH=$(CURDIR)/operator $(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check operator tests benchmarks dev
	$(VENV)/bin/mypy

# Test files run side by side in TEST_WORKERS processes (pytest-xdist): most of the time is end-to-end waiting on
# real servers, so more workers than cores pays. A file stays in one worker, with that worker's own control plane,
# Triton and Prometheus on free ports. TEST_WORKERS=0 runs everything in one process. Files are handed out in
# collection order (--no-loadscope-reorder), which tests/e2e/conftest.py sorts longest first: xdist's own order (most
# tests first) handed the longest end-to-end files out last, the run's tail.
TEST_WORKERS ?= 6
test: lint tools prometheus openmpi moto
	$(PY) -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# moto's S3 server for tests/fetch, in its own venv: botocore pins python-dateutil below 3, the kubernetes client needs 3+.
MOTO_VENV := $(HOME)/.cache/llmbackend/moto-venv
moto: $(MOTO_VENV)/bin/moto_server

$(MOTO_VENV)/bin/moto_server:
	python3 -m venv $(MOTO_VENV)
	$(MOTO_VENV)/bin/pip install -q 'moto[server]>=5.1,<6'

unit: setup
	$(PY) -m pytest -p no:cacheprovider tests/unit

# Two runs: named together, the two directories' conftest modules collide (`from conftest import` in each).
e2e: tools prometheus openmpi moto
	$(PY) -m pytest -p no:cacheprovider tests/e2e
	$(PY) -m pytest -p no:cacheprovider tests/triton

crd: setup
	$(VENV)/bin/llmbackend crd > crds/llmbackend.yaml
	$(VENV)/bin/llmbackend crd --reference > docs/configuration.md
	$(MAKE) chart docs

# The Helm chart's generated parts (Chart.yaml version, CRD, RBAC, monitoring, dashboard) from their sources:
# run after changing the version, the API, manifests/default/rbac.yaml, manifests/monitoring or the dashboard.
chart: setup
	$(DEVTOOLS) -m devcluster.chart

# Generated docs: the preset catalog and the troubleshooting table of condition reasons.
docs: setup
	$(DEVTOOLS) -m devcluster.docsgen

bench: tools
	$(PY) benchmarks/plan_bench.py
	$(PY) benchmarks/autoscale_bench.py

down: setup
	$(DEVTOOLS) -m devcluster down

clean: down
	rm -rf $(VENV)
