#!/usr/bin/env bash
# Install the Debian packages the real node (lorarl_dev.node) and the image builds
# (lorarl_dev.images) need, only those missing.
# Idempotent: with everything present it changes nothing and needs no network.
#
#   containerd runc containernetworking-plugins   the container runtime and the CNI plugins
#   iptables conntrack iproute2 util-linux         kube-proxy, the network namespace, nsenter
#   umoci busybox-static openssl gcc libc6-dev     the node's own images (OCI layouts; pause is gcc -static)
#   buildah mmdebstrap                              the operator and job images (hack/images/README.md)
#
# Debian's containerd package would start a service: a policy-rc.d that refuses (exit 101) keeps it
# from running one; the harness starts containerd itself with a config of its own.
set -euo pipefail

packages=(containerd runc containernetworking-plugins iptables conntrack iproute2 util-linux
	umoci busybox-static openssl gcc libc6-dev buildah mmdebstrap)

missing=()
for pkg in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$pkg")
	fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "hack/node/packages.sh: all installed (${packages[*]})"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "hack/node/packages.sh: missing ${missing[*]}; run as root (apt-get install)" >&2
	exit 1
fi
echo "hack/node/packages.sh: installing ${missing[*]}"
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	made_policy=1
fi
trap '[[ $made_policy -eq 1 ]] && rm -f "$policy"' EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
