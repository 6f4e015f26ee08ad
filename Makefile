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
export PYTHONPATH := $(CURDIR)/devcluster:$(CURDIR)/api:$(CURDIR)/operator:$(CURDIR)/trainer-image:$(CURDIR)/cli

.PHONY: operator-up operator-down demo prepared registry-binary images-pushed images kind-up kind-load kind-demo kind-down
.PHONY: help venv wheels crds binaries dev-cluster dev-cluster-down dev-cluster-status test unit soak integration lint bench bench-cluster bench-scale bench-trainer clean-cache

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) \
		| awk -F':.*## ' '{ printf "make %-20s %s\n", $$1, $$2 }'

# The venv is rebuilt only when the requirements or the package metadata change. The trainer's wheels (torch's
# 5 GB) are downloaded once into the cache (ringleader_devcluster/wheels.py): the venv and the trainer image both
# install from there.
VENV_STAMP := $(VENV)/.stamp-$(shell cat requirements/*.txt | sha256sum | cut -c1-12)
venv: $(VENV_STAMP) ## the venv with every pinned tool and library (rebuilt when requirements/ change)
$(VENV_STAMP): | wheels
	@bash devcluster/check-system.sh
	@wheels=$$(python3 -m ringleader_devcluster.wheels) \
		&& echo "[venv] creating $(VENV) (torch from $$wheels, the rest from PyPI; about a minute)" \
		&& rm -rf $(VENV) && python3 -m venv $(VENV) \
		&& $(VENV)/bin/pip install --quiet --disable-pip-version-check --no-index --find-links "$$wheels" -r requirements/trainer.txt
	@$(VENV)/bin/pip install --disable-pip-version-check -r requirements/dev.txt | grep -v '^Requirement already satisfied'; test $${PIPESTATUS[0]} -eq 0
	@touch $@

wheels: ## download the trainer's wheels into the cache once (torch: 5 GB), for the venv and the trainer image
	@bash devcluster/check-system.sh
	@python3 -m ringleader_devcluster.wheels >/dev/null

# The CRD is generated from the pydantic models; a unit test fails when the checked-in copy differs.
crds: venv ## regenerate crds/trainingjob.yaml (and the chart's copy, docs/trainingjob.md) from the pydantic models
	@$(PY) -m ringleader_operator.crd > crds/trainingjob.yaml
	@cp crds/*.yaml helm/ringleader/crds/
	@$(PY) -m ringleader_operator.reference > docs/trainingjob.md
	@echo "wrote crds/trainingjob.yaml, the chart's copy and docs/trainingjob.md"

# Kueue's manager and kube-router (minutes each of a cold build) only where they run: KUEUE=1, NETPOL=1, and the
# targets below that test or measure them (their tests start them); `make demo` and a plain `make dev-cluster`
# do without.
BUILD_KUEUE = $(filter-out 0,$(KUEUE))
BUILD_NETPOL = $(filter-out 0,$(NETPOL))
test integration bench-cluster: BUILD_KUEUE = 1
test integration: BUILD_NETPOL = 1
binaries: registry-binary ## build the Kubernetes binaries and helm into the cache (Kueue's manager with KUEUE=1, kube-router with NETPOL=1)
	@bash devcluster/check-system.sh
	@bash devcluster/build-binaries.sh $(if $(BUILD_KUEUE),--kueue) $(if $(BUILD_NETPOL),--netpol)

dev-cluster: venv binaries ## start etcd, kube-apiserver, controller-manager, scheduler, the process and real nodes [FAKE_NODES=N] [KUEUE=1] [NETPOL=1]
	@$(PY) -m ringleader_devcluster up --no-build $(if $(FAKE_NODES),--fake-nodes $(FAKE_NODES)) $(if $(filter-out 0,$(KUEUE)),--kueue,--no-kueue) $(if $(filter-out 0,$(NETPOL)),--netpol,--no-netpol)

dev-cluster-down: venv ## stop all of it and remove .dev/
	@$(PY) -m ringleader_devcluster down

operator-up: dev-cluster ## install the CRD and run the operator against the dev cluster
	@$(PY) -m ringleader_devcluster operator-up

operator-down: venv ## stop the operator
	@$(PY) -m ringleader_devcluster operator-down

dev-cluster-status: venv ## what of the dev cluster runs
	@$(PY) -m ringleader_devcluster status

lint: venv binaries ## ruff (with complexity limits), mypy, the import-layer contracts, helm lint, hadolint
	@$(VENV)/bin/ruff check devcluster api operator trainer-image cli tests bench examples
	@$(VENV)/bin/ruff format --check devcluster api operator trainer-image cli tests bench examples
	@$(VENV)/bin/mypy
	@out=$$(PYTHONPATH=api:operator:trainer-image:devcluster:cli $(VENV)/bin/lint-imports --no-cache) \
		&& echo "$$out" | grep -E 'KEPT|^Contracts' || { echo "$$out"; exit 1; }
	@$(HELM) lint --strict helm/ringleader
	@$(VENV)/bin/hadolint Dockerfile trainer-image/Dockerfile

UNIT_PYTEST = $(PY) -m pytest --durations=10 tests/unit tests/integration/trainer
unit: venv ## unit and trainer tests (no cluster)
	@$(UNIT_PYTEST)

# The images are built and pushed before pytest: a first build of the trainer image takes minutes (torch's wheels).
# The tests run INTEGRATION_WORKERS at a time (pytest-xdist; tests that count the process node's GPUs stay on one
# worker, so do those that add kwok fake nodes), then those marked serial or lifecycle run alone: they restart or
# measure what every test shares.
INTEGRATION_TESTS := tests/integration/devcluster tests/integration/operator tests/integration/cli tests/e2e
INTEGRATION_WORKERS ?= 2
SHARED_PYTEST = $(PY) -m pytest --durations=10 -n $(INTEGRATION_WORKERS) --dist loadgroup -m "not serial and not lifecycle" $(INTEGRATION_TESTS)
SERIAL_PYTEST = $(PY) -m pytest --durations=10 -m "serial or lifecycle" $(INTEGRATION_TESTS)
PUSH_IMAGES = $(PY) -m ringleader_devcluster images --push operator trainer
integration: dev-cluster ## integration and end-to-end tests on the dev cluster
	@$(PUSH_IMAGES)
	@$(SHARED_PYTEST)
	@$(SERIAL_PYTEST)

# The serial dev-cluster tests mostly wait (the cores were 41 % busy), so the unit and trainer tests run beside
# them, each line prefixed with its part.
test: prepared ## lint, unit, integration: what CI runs
	@$(MAKE) --no-print-directory lint dev-cluster
	@$(PUSH_IMAGES)
	@$(SHARED_PYTEST)
	@tests/overlapped.sh unit '$(UNIT_PYTEST)' serial '$(SERIAL_PYTEST)'

soak: venv ## the property tests at ten times make test's examples (admitted specs: 100,000), no cluster
	@SPEC_EXAMPLES=100000 $(PY) -m pytest --durations=5 tests/unit/operator/test_spec_property.py

# Each part ends by refreshing BENCHMARKS.md and bench/plots/ from whatever results exist.
bench: bench-cluster bench-trainer ## all benchmarks: bench/results/, BENCHMARKS.md, bench/plots/

bench-cluster: dev-cluster ## Ringleader vs Kubeflow's training-operator on the dev cluster; recovery time
	@$(PY) bench/devcluster_bench.py
	@bash bench/peer/build-training-operator.sh
	@$(PY) -m bench.control_plane_bench
	@$(PY) -m bench.recovery_bench
	@$(PY) -m bench.launcher_bench
	@$(PY) -m bench.stall_bench hang
	@$(PY) -m bench.stall_bench hang --how sigstop --deadline 20
	@$(PY) -m bench.stall_bench classify
	@$(PY) -m bench.image_rebuild_bench
	@$(PY) -m bench.topology_bench
	@$(PY) -m bench.gang_backends_bench
	@$(PY) -m bench.elastic_admission_bench
	@$(PY) -m bench.report

bench-scale: dev-cluster ## one job of 1,000 to 10,000 workers, 1,000 jobs of 8: cost against n (over 3 hours)
	@bash bench/peer/build-training-operator.sh
	@$(PY) -m bench.round_cost_bench
	@$(PY) -m bench.scale_bench --gang-backend gates
	@$(PY) -m bench.scale_bench --gang-backend gates --workers 2000 --small-jobs 0 --reps 3 --late-idle 0 \
		--subjects ringleader training-operator --other-pods 20000
	@$(PY) -m bench.scale_bench --subjects floor floor/worker-0-named --workers 5000 --small-jobs 0 --reps 3
	@$(PY) -m bench.report

bench-trainer: venv ## ring vs gloo; step time per strategy and with OMP_NUM_THREADS; checkpoint, stop, stall-export costs; sharding memory; pipeline bubble; DiLoCo vs local SGD; goodput under repeated kills
	@$(PY) -m bench.allreduce_bench
	@$(PY) -m bench.strategy_bench
	@$(PY) -m bench.omp_threads_bench
	@$(PY) -m bench.checkpoint_bench
	@$(PY) -m bench.stop_bench
	@$(PY) -m bench.stall_bench export
	@$(PY) -m bench.stall_bench recorder
	@$(PY) -m bench.sharded_bench
	@$(PY) -m bench.pipeline_bench
	@$(PY) -m bench.diloco_bench
	@$(PY) -m bench.goodput_bench
	@$(PY) -m bench.report

# The main job: the dev cluster (built on first use), the operator installed with helm, an example job followed
# to Succeeded.
# On a fresh machine the Go builds keep both cores busy for about ten minutes, so the downloads (the trainer's
# wheels, PyPI, Debian's base image) and the image builds run beside them (make -j): `prepared` is the venv, the
# binaries and the images built and pushed to the dev cluster's registry.
prepared:
	@bash devcluster/check-system.sh
	@$(MAKE) --no-print-directory -j 3 venv binaries $(if $(filter 0,$(RINGLEADER_REAL_NODE)),,images-pushed) \
		BUILD_KUEUE=$(BUILD_KUEUE) BUILD_NETPOL=$(BUILD_NETPOL)

# The registry is built first (a minute of a cold build), so the images are pushed while the other Go builds
# still run; it keeps running (its storage in the cache) until `make dev-cluster-down`.
registry-binary:
	@bash devcluster/build-binaries.sh --registry-only

images-pushed: wheels registry-binary
	@mkdir -p $(DEV_DIR) && python3 -m ringleader_devcluster.images --push operator trainer

demo: prepared ## dev cluster + operator installed with helm + an example job to Succeeded
	@$(MAKE) --no-print-directory dev-cluster
	@$(PY) -m ringleader_devcluster.demo

# ---- for users with Docker and kind (the standard kind workflow; not exercised where no Docker engine runs) ----
# With Docker: docker build. Without: buildah on a base image made with debootstrap, into OCI archives in the
# cache (devcluster/ringleader_devcluster/images.py); the dev cluster's real node pulls them from its registry
# instead (`images --push`, which make test and make demo do).
images: ## the operator and trainer images (docker build, or buildah without Docker)
	@if command -v $(DOCKER) >/dev/null && $(DOCKER) info >/dev/null 2>&1; then \
		$(DOCKER) build -t $(OPERATOR_IMAGE) . && $(DOCKER) build -f trainer-image/Dockerfile -t $(TRAINER_IMAGE) .; \
	else \
		$(MAKE) -s venv && bash devcluster/check-system.sh && mkdir -p $(DEV_DIR) && $(PY) -m ringleader_devcluster images; \
	fi

kind-up: ## a kind cluster (needs Docker and kind)
	@$(KIND) get clusters 2>/dev/null | grep -qx $(KIND_CLUSTER) || $(KIND) create cluster --name $(KIND_CLUSTER) --wait 120s

kind-load: images kind-up ## the images loaded into the kind cluster
	$(KIND) load docker-image $(OPERATOR_IMAGE) $(TRAINER_IMAGE) --name $(KIND_CLUSTER)

kind-demo: kind-load binaries ## kind cluster, images loaded, chart installed, example job
	$(HELM) upgrade --install ringleader helm/ringleader --kube-context kind-$(KIND_CLUSTER) \
		--namespace ringleader-system --create-namespace --set image.tag=$(IMAGE_TAG) --wait --timeout 180s
	kubectl --context kind-$(KIND_CLUSTER) apply -f examples/digits-allreduce.yaml
	kubectl --context kind-$(KIND_CLUSTER) wait --for=condition=Succeeded tj/digits-allreduce --timeout=15m
	kubectl --context kind-$(KIND_CLUSTER) get tj

kind-down: ## delete the kind cluster
	$(KIND) delete cluster --name $(KIND_CLUSTER)

clean-cache: ## remove the cache (venv, Kubernetes builds, images): the next make starts cold
	@echo "[clean-cache] removing $(CACHE)"
	@rm -rf $(CACHE)
