//go:build tools

// Package tools pins kwok (fake nodes and pods for the embedded control
// plane; optional, built by ../build.sh kwok). Its own module: kwok pins
// its own Kubernetes client libraries.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
