# The two entry points (see README): `make demo` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# a second venv with every runtime dependency at the lowest version of its declared range
LOWEST       := .venv-lowest
LOWEST_STAMP := $(LOWEST)/.installed

.PHONY: setup packages controlplane lint test test-lowest test-fast demo demo-down generate bench clean

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

# ruff's lint rules and its formatter (pyproject.toml [tool.ruff]): `ruff format .` fixes what the check refuses
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The Debian packages the real node and the image builds need (hack/node/packages.sh: only those
# missing), the observability tests' (prometheus) and the GitOps tests' (git, redis-server). As root
# they are installed; otherwise the tests that need them skip, saying why.
packages:
	@if [ "$$(id -u)" -eq 0 ]; then bash hack/node/packages.sh && bash hack/observability/packages.sh && bash hack/gitops/packages.sh; \
	else echo "make packages: not root; the real-node and image tests will be skipped"; fi

# the lint and the lowest-versions run first, so that the full suite's summary is the last line CI reads;
# the suite runs as two streams side by side (hack/run-suite.sh: the real-node and image tests beside the rest)
test: lint packages controlplane
	$(MAKE) test-lowest
	bash hack/run-suite.sh $(BIN)/python

# The ranges in pyproject.toml are tested at both ends: `test` at the newest versions, this at
# the lowest (hack/constraints-lowest.txt): the fast tests and the operator on the real API server.
# Left out: tests/image (it installs the newest versions into a venv of its own) and
# tests/reporter (the in-job reporter is stdlib-only: no dependency of ours reaches it).
test-lowest: controlplane $(LOWEST_STAMP)
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider -m "not controlplane" --ignore=tests/image --ignore=tests/reporter
	$(LOWEST)/bin/python -m pytest -q -p no:cacheprovider tests/operator/test_operator_rbac.py \
	  tests/operator/test_operator.py::test_success_sequence_and_kubectl_wait

test-fast: setup
	$(BIN)/python -m pytest -m "not controlplane"

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
	bash hack/gen-install-manifests.sh
	$(BIN)/lorarl-dev docs -o docs/api.md
	$(BIN)/lorarl-dev known-fields -o operator/lorarl/control/known_fields.json
	$(BIN)/python hack/observability/dashboard.py > charts/lorarl-operator/files/dashboard.json

clean:
	rm -rf $(VENV) $(LOWEST) .pytest_cache .hypothesis
