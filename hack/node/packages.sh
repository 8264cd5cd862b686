#!/usr/bin/env bash
# The Debian packages the real node (lorarl_dev.node) and the image builds (lorarl_dev.images)
# need; hack/debian-packages.sh installs those missing.
#
#   containerd runc containernetworking-plugins   the container runtime and the CNI plugins
#   iptables conntrack iproute2 util-linux         kube-proxy, the network namespace, nsenter
#   umoci busybox-static openssl gcc libc6-dev     the node's own images (OCI layouts; pause is gcc -static)
#   buildah mmdebstrap                              the operator and job images (hack/images/README.md)
#
# Debian's containerd would start a service: the shared step keeps it from running one; the harness
# starts containerd itself with a config of its own.
set -euo pipefail
exec bash "$(dirname "$0")/../debian-packages.sh" hack/node/packages.sh \
	containerd runc containernetworking-plugins iptables conntrack iproute2 util-linux \
	umoci busybox-static openssl gcc libc6-dev buildah mmdebstrap
