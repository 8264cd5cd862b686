//go:build tools

// Package tools pins the real KubeRay operator (optional, built by
// ../build.sh kuberay-operator, run as a local process against the embedded
// control plane). Its own module: KubeRay pins its own Kubernetes libraries.
package tools

import (
	_ "github.com/ray-project/kuberay/ray-operator"
)
