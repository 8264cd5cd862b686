//go:build tools

// Package tools pins go-containerregistry's crane, which build.sh compiles: `crane registry serve`
// is the OCI registry of the export tests (pkg/registry), and crane's manifest/blob commands read
// back what the exporter pushed, independently of it.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
)
