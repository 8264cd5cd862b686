// Command coredns is cluster DNS for the embedded real node: CoreDNS v1.15.0 with only the
// plugins a one-node test cluster needs (no cloud back ends; no forward: nothing may leave the
// node's network namespace, so no loop detection either; bind keeps it on the node IP).
//
// This is CoreDNS's documented way to build with a chosen plugin set outside its tree: import the
// plugins, set dnsserver.Directives (the order in which they run; it must follow the order of
// CoreDNS's plugin.cfg, v1.15.0: bind, ready, health, errors, log, cache, kubernetes),
// then call coremain.Run. Its own module: in hack/controlplane's module, CoreDNS's requirements
// would raise ~30 dependencies shared with kube-apiserver and etcd (grpc 1.82.1 -> 1.84.0, etcd
// client 3.7.0 -> 3.7.2, x/net, protobuf, otel, ...), i.e. build them with versions Kubernetes
// v1.37.2 was not released with.
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}
}

func main() { coremain.Run() }
