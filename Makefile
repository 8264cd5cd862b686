# The two entry points (see README): `make demo` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# a second venv with every runtime dependency at the lowest version of its declared range
LOWEST       := .venv-lowest
LOWEST_STAMP := $(LOWEST)/.installed

.PHONY: setup packages controlplane binaries binaries-api binaries-e2e lint test test-unit test-api test-e2e demo demo-down generate bench clean

# setuptools' box about editable installs of a flat layout (hack/devtools) is information, not a
# problem: silenced by its message, so that a real warning still shows
QUIET_EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

$(STAMP): pyproject.toml hack/devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(QUIET_EDITABLE) $(BIN)/pip install --quiet -e '.[test,hub]' -e hack/devtools
	touch $@

setup: $(STAMP)

$(LOWEST_STAMP): pyproject.toml hack/devtools/pyproject.toml hack/constraints-lowest.txt
	rm -rf $(LOWEST)
	$(PYTHON) -m venv $(LOWEST)
	$(LOWEST)/bin/pip install --quiet --upgrade pip
	$(QUIET_EDITABLE) $(LOWEST)/bin/pip install --quiet -c hack/constraints-lowest.txt -e '.[test]' -e hack/devtools
	touch $@

# Real etcd / kube-apiserver / kube-controller-manager, built once from the Go module proxy
# into ~/.cache/lorarl/controlplane/<version>/bin (a no-op when they are there).
controlplane: setup
	bash hack/controlplane/build.sh

# What each tier starts, built before it runs (a no-op when present; hack/controlplane/README.md)
API_BINARIES := etcd kube-apiserver kube-controller-manager kube-scheduler kwok kuberay-operator kstatus kueue \
	helm source-controller kustomize-controller crane argocd-application-controller argocd-repo-server
E2E_BINARIES := etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy fakegpu coredns \
	kuberay-operator kueue helm source-controller kustomize-controller crane

binaries-api: setup
	bash hack/controlplane/build.sh $(API_BINARIES)

binaries-e2e: setup
	bash hack/controlplane/build.sh $(E2E_BINARIES)

# both tiers' in one build.sh call: the k8s binaries of both in one `go build`
binaries: setup
	bash hack/controlplane/build.sh $(API_BINARIES) $(filter-out $(API_BINARIES),$(E2E_BINARIES))

# ruff's lint rules and its formatter (pyproject.toml [tool.ruff]): `ruff format .` fixes what the check refuses,
# the package's layers (pyproject.toml [tool.importlinter]: lint-imports) and its types (pyproject.toml [tool.mypy])
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The Debian packages the real node and the image builds need (hack/node/packages.sh: only those
# missing), the observability tests' (prometheus) and the GitOps tests' (git, redis-server). As root
# they are installed; otherwise the tests that need them skip, saying why.
packages:
	@if [ "$$(id -u)" -eq 0 ]; then bash hack/node/packages.sh && bash hack/observability/packages.sh && bash hack/gitops/packages.sh; \
	else echo "make packages: not root; the real-node and image tests will be skipped"; fi

# The suite in three tiers (hack/run-tiers.sh; tests/conftest.py says which test is in which):
#   test-unit  no server, no cluster, on both cores, at the newest and at the lowest versions
#   test-api   real control planes, local servers and venvs
#   test-e2e   the real node, the images, real pods
# `make test` (what CI runs): lint, then the three, fastest first, stopping at the first that fails.
# The ranges in pyproject.toml are tested at both ends: the lowest (hack/constraints-lowest.txt)
# in .venv-lowest, by the unit tier and by two operator tests of the api tier.
test-unit: setup $(LOWEST_STAMP)
	bash hack/run-tiers.sh unit

test-api: packages binaries-api $(LOWEST_STAMP)
	bash hack/run-tiers.sh api

test-e2e: packages binaries-e2e
	bash hack/run-tiers.sh e2e

test: lint packages binaries $(LOWEST_STAMP)
	bash hack/run-tiers.sh all

demo: packages controlplane
	$(BIN)/lorarl-dev demo

demo-down: setup
	$(BIN)/lorarl-dev demo down

# The benchmark: ours, the ceiling and KubeRay's operator on the embedded control plane; writes
# docs/benchmarks.md, docs/benchmarks.png and docs/benchmarks.json (31.4 min end to end on 2 quiet
# cores, 13 of them kopf's start-up over the 10,000 finished jobs of the history point).
bench: controlplane
	$(BIN)/python -m bench --full

# Regenerate what is generated from the API model (tests fail when these drift).
generate: setup
	$(BIN)/lorarl crd > crds/lorarl.dev_lorarljobs.yaml
	cp crds/lorarl.dev_lorarljobs.yaml charts/lorarl-operator/crds/lorarl.dev_lorarljobs.yaml
	$(BIN)/lorarl-dev job-references -o charts/lorarl-operator/files/job-references.yaml
	$(BIN)/python hack/observability/dashboard.py > charts/lorarl-operator/files/dashboard.json
	bash hack/gen-install-manifests.sh
	$(BIN)/lorarl-dev docs -o docs/api.md
	$(BIN)/lorarl-dev known-fields -o operator/lorarl/control/known_fields.json

clean:
	rm -rf $(VENV) $(LOWEST) .pytest_cache .hypothesis
