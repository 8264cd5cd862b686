# The two entry points (see README): `make demo` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup controlplane test test-fast demo demo-down generate clean

$(STAMP): pyproject.toml hack/devtools/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e hack/devtools
	touch $@

setup: $(STAMP)

# Real etcd / kube-apiserver / kube-controller-manager, built once from the Go module proxy
# into ~/.cache/lorarl/controlplane/<version>/bin (a no-op when they are there).
controlplane: setup
	bash hack/controlplane/build.sh

test: controlplane
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -m "not controlplane"

demo: controlplane
	$(BIN)/lorarl-dev demo

demo-down: setup
	$(BIN)/lorarl-dev demo down

# Regenerate what is generated from the API model (tests fail when these drift).
generate: setup
	$(BIN)/lorarl crd > crds/lorarl.dev_lorarljobs.yaml
	cp crds/lorarl.dev_lorarljobs.yaml charts/lorarl-operator/crds/lorarl.dev_lorarljobs.yaml
	bash hack/gen-install-manifests.sh
	$(BIN)/lorarl-dev docs -o docs/api.md
	LORARL_UPDATE_SNAPSHOTS=1 $(BIN)/python -m pytest -q tests/render

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
