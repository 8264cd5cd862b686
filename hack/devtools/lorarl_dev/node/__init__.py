"""A real Kubernetes node in the embedded cluster: containerd, kubelet, kube-proxy, CoreDNS and a
fake AMD GPU device plugin, with the whole cluster inside one network namespace of our own.

Modules: :mod:`.netns` (the namespace, entering it), :mod:`.relay` (the API server reachable from
the root namespace), :mod:`.images` (pause and busybox OCI archives), :mod:`.realnode` (the node's
processes, images, storage and tear-down), :mod:`.packages` (the Debian packages it needs).
"""
