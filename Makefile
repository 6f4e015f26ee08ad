# Ringleader. `make demo` runs the operator and an example job on a local cluster; `make test` runs everything
# (lint, unit, integration on the dev cluster); `make dev-cluster` starts the local Kubernetes. Binaries and the
# Python venv live in the cache ($(CACHE)), state in .dev/.
SHELL := /bin/bash
.DEFAULT_GOAL := help
include devcluster/versions.env

CACHE ?= $(or $(RINGLEADER_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ringleader)
DEV_DIR ?= $(CURDIR)/.dev
VENV := $(CACHE)/venv
PY := $(VENV)/bin/python
FAKE_NODES ?=
HELM := $(CACHE)/helm-$(HELM_VERSION)/helm
# Images and kind, for users with Docker (not exercised on machines without a Docker engine).
DOCKER ?= docker
KIND ?= kind
KIND_CLUSTER ?= ringleader
IMAGE_TAG ?= 0.1.0
OPERATOR_IMAGE ?= ringleader/operator:$(IMAGE_TAG)
TRAINER_IMAGE ?= ringleader/trainer:$(IMAGE_TAG)
export RINGLEADER_CACHE := $(CACHE)
export RINGLEADER_DEV_DIR := $(DEV_DIR)
# The venv (shared by every checkout on the machine) holds third-party packages only; this checkout's own
# packages come from here, so each clone runs and tests its own code.
export PYTHONPATH := $(CURDIR)/devcluster:$(CURDIR)/operator:$(CURDIR)/trainer-image

.PHONY: operator-up operator-down demo images kind-up kind-load kind-demo kind-down
.PHONY: help venv crds binaries dev-cluster dev-cluster-down dev-cluster-status test unit integration lint bench bench-cluster bench-trainer clean-cache

help:
	@echo "make demo                        dev cluster + operator installed with helm + an example job to Succeeded"
	@echo "make dev-cluster [FAKE_NODES=N]  start etcd, kube-apiserver, controller-manager, scheduler, the process and real nodes"
	@echo "make dev-cluster-down            stop all of it and remove .dev/"
	@echo "make operator-up / operator-down install the CRD and run the operator against the dev cluster"
	@echo "make test                        lint, unit tests, integration tests on the dev cluster"
	@echo "make lint                        ruff, mypy, helm lint, hadolint"
	@echo "make crds                        regenerate crds/trainingjob.yaml from the pydantic models"
	@echo "make bench                       all benchmarks below: bench/results/, BENCHMARKS.md, bench/plots/"
	@echo "make bench-cluster               dev-cluster start; Ringleader vs Kubeflow's training-operator; recovery time"
	@echo "make bench-trainer               ring vs gloo; step time per strategy; checkpoint overhead (no cluster)"
	@echo "make images                      the operator and trainer images (docker build, or buildah without Docker)"
	@echo "make kind-demo                   kind cluster, images loaded, chart installed, example job (needs Docker, kind)"
	@echo "make kind-down                   delete the kind cluster"

# The venv is rebuilt only when the requirements or the package metadata change.
VENV_STAMP := $(VENV)/.stamp-$(shell cat requirements/*.txt | sha256sum | cut -c1-12)
venv: $(VENV_STAMP)
$(VENV_STAMP):
	@bash devcluster/check-system.sh
	@echo "[venv] creating $(VENV) (first time about 2 minutes: torch alone is 5 GB)"
	@rm -rf $(VENV) && python3 -m venv $(VENV)
	@$(VENV)/bin/pip install --disable-pip-version-check -r requirements/dev.txt | grep -v '^Requirement already satisfied'; test $${PIPESTATUS[0]} -eq 0
	@touch $@

# The CRD is generated from the pydantic models; a unit test fails when the checked-in copy differs.
crds: venv
	@$(PY) -m ringleader_operator.crd > crds/trainingjob.yaml
	@cp crds/*.yaml helm/ringleader/crds/
	@$(PY) -m ringleader_operator.reference > docs/trainingjob.md
	@echo "wrote crds/trainingjob.yaml, the chart's copy and docs/trainingjob.md"

binaries:
	@bash devcluster/check-system.sh
	@bash devcluster/build-binaries.sh

dev-cluster: venv binaries
	@$(PY) -m ringleader_devcluster up --no-build $(if $(FAKE_NODES),--fake-nodes $(FAKE_NODES))

dev-cluster-down: venv
	@$(PY) -m ringleader_devcluster down

operator-up: dev-cluster
	@$(PY) -m ringleader_devcluster operator-up

operator-down: venv
	@$(PY) -m ringleader_devcluster operator-down

dev-cluster-status: venv
	@$(PY) -m ringleader_devcluster status

lint: venv binaries
	@$(VENV)/bin/ruff check devcluster operator trainer-image tests bench examples
	@$(VENV)/bin/ruff format --check devcluster operator trainer-image tests bench examples
	@$(VENV)/bin/mypy
	@$(HELM) lint --strict helm/ringleader
	@$(VENV)/bin/hadolint Dockerfile trainer-image/Dockerfile

unit: venv
	@$(PY) -m pytest --durations=10 tests/unit tests/trainer

# The images are built and pushed before pytest: a first build of the trainer image takes minutes (torch's wheels).
integration: dev-cluster
	@$(PY) -m ringleader_devcluster images --push operator trainer
	@$(PY) -m pytest --durations=10 tests/devcluster tests/operator tests/e2e

test: lint unit integration

# Each part ends by refreshing BENCHMARKS.md and bench/plots/ from whatever results exist.
bench: bench-cluster bench-trainer

bench-cluster: dev-cluster
	@$(PY) bench/devcluster_bench.py
	@bash bench/peer/build-training-operator.sh
	@$(PY) -m bench.control_plane_bench
	@$(PY) -m bench.recovery_bench
	@$(PY) -m bench.launcher_bench
	@$(PY) -m bench.image_rebuild_bench
	@$(PY) -m bench.report

bench-trainer: venv
	@$(PY) -m bench.allreduce_bench
	@$(PY) -m bench.strategy_bench
	@$(PY) -m bench.checkpoint_bench
	@$(PY) -m bench.report

# The main job: the dev cluster (built on first use), the operator installed with helm, an example job followed
# to Succeeded.
demo:
	@echo "[demo] a cold first run on a fresh machine took 23 minutes here (Go builds of Kubernetes, torch, the trainer image: 5 GB of wheels); later runs about 72 s"
	@$(MAKE) --no-print-directory dev-cluster
	@$(PY) -m ringleader_devcluster.demo

# ---- for users with Docker and kind (the standard kind workflow; not exercised where no Docker engine runs) ----
# With Docker: docker build. Without: buildah on a base image made with debootstrap, into OCI archives in the
# cache (devcluster/ringleader_devcluster/images.py); the dev cluster's real node pulls them from its registry
# instead (`images --push`, which make test and make demo do).
images:
	@if command -v $(DOCKER) >/dev/null && $(DOCKER) info >/dev/null 2>&1; then \
		$(DOCKER) build -t $(OPERATOR_IMAGE) . && $(DOCKER) build -f trainer-image/Dockerfile -t $(TRAINER_IMAGE) .; \
	else \
		$(MAKE) -s venv && bash devcluster/check-system.sh && mkdir -p $(DEV_DIR) && $(PY) -m ringleader_devcluster images; \
	fi

kind-up:
	@$(KIND) get clusters 2>/dev/null | grep -qx $(KIND_CLUSTER) || $(KIND) create cluster --name $(KIND_CLUSTER) --wait 120s

kind-load: images kind-up
	$(KIND) load docker-image $(OPERATOR_IMAGE) $(TRAINER_IMAGE) --name $(KIND_CLUSTER)

kind-demo: kind-load binaries
	$(HELM) upgrade --install ringleader helm/ringleader --kube-context kind-$(KIND_CLUSTER) \
		--namespace ringleader-system --create-namespace --set image.tag=$(IMAGE_TAG) --wait --timeout 180s
	kubectl --context kind-$(KIND_CLUSTER) apply -f examples/digits-allreduce.yaml
	kubectl --context kind-$(KIND_CLUSTER) wait --for=condition=Succeeded tj/digits-allreduce --timeout=15m
	kubectl --context kind-$(KIND_CLUSTER) get tj

kind-down:
	$(KIND) delete cluster --name $(KIND_CLUSTER)
