//go:build tools

// Package tools pins the helm CLI that ../build.sh compiles. It lives in its
// own module so that helm's dependency versions never shift the ones that
// kube-apiserver and friends are built with (and vice versa).
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
