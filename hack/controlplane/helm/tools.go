//go:build tools

// Package tools pins the helm CLI and Flux's source-controller and kustomize-controller that
// ../build.sh compiles, in one go build: source-controller links Helm v4 itself (it packages
// charts), so the three share one dependency graph (helm v4.3.2, the v0.37.2 client libraries,
// controller-runtime v0.25.2, as Flux v1.10 uses) and it is compiled once. The module is its
// own so that these versions never shift the ones kube-apiserver and friends are built with
// (and vice versa). lorarl_dev.flux reads the Flux versions from go.mod.
package tools

import (
	_ "github.com/fluxcd/kustomize-controller"
	_ "github.com/fluxcd/source-controller"
	_ "helm.sh/helm/v4/cmd/helm"
)
