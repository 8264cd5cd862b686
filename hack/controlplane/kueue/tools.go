//go:build tools

// Package tools pins the real Kueue manager (optional, built by
// ../build.sh kueue from sigs.k8s.io/kueue/cmd/kueue, run as a local process
// against the embedded control plane). Its own module: Kueue pins its own
// Kubernetes and controller-runtime libraries.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
