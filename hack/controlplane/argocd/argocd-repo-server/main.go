// Command argocd-repo-server is Argo CD's own argocd-repo-server: the command of argo-cd's
// cmd/main.go (v3.6.2) for that binary name, without the other commands it links (the API server's
// UI, the CLI, Dex, ...), so only what the embedded control plane runs is compiled.
package main

import (
	"os"

	"k8s.io/klog/v2"

	reposerver "github.com/argoproj/argo-cd/v3/cmd/argocd-repo-server/commands"
	"github.com/argoproj/argo-cd/v3/util/log"
)

// as cmd/main.go's init and main do for every command, but for util/grpc.DisableSRVLookups: that
// clears the flag grpc's grpclb balancer sets when it is linked (balancer/grpclb/grpclb.go:107 in grpc v1.84.0),
// and panics when the flag is already false, as it is here, where nothing links grpclb: gRPC makes
// no SRV lookups either way.
func main() {
	klog.SetLogger(log.NewLogrusLogger(log.NewWithCurrentConfig()))
	if err := reposerver.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
