#!/usr/bin/env bash
# Install the Debian packages given, only those missing (the shared step of hack/*/packages.sh,
# whose lists say what each part needs and why).
# Idempotent: with everything present it changes nothing and needs no network.
#
# Debian's packages of daemons (containerd, prometheus) would start a service: a policy-rc.d that
# refuses (exit 101) keeps invoke-rc.d from starting anything, and --no-install-recommends keeps
# their recommends (e.g. prometheus-node-exporter) out; the harness starts what it needs itself.
#
# usage: hack/debian-packages.sh CALLER PACKAGE...   (CALLER names the list in messages)
set -euo pipefail
caller=$1
shift
packages=("$@")

missing=()
for pkg in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$pkg")
	fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "$caller: all installed (${packages[*]})"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "$caller: missing ${missing[*]}; run as root (apt-get install)" >&2
	exit 1
fi
echo "$caller: installing ${missing[*]}"
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
