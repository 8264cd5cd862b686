#!/usr/bin/env bash
# Install the Debian packages the observability tests need (tests/observability), only those missing.
# Idempotent: with everything present it changes nothing and needs no network.
#
#   prometheus    promtool (`promtool test rules`, `promtool check rules`) and the prometheus server
#                 the dashboard test starts itself on 127.0.0.1 (Debian bookworm: 2.42)
#
# Debian's prometheus package would start a service (and prometheus-node-exporter, a recommend, a
# second one): --no-install-recommends, and a policy-rc.d that refuses (exit 101) keeps invoke-rc.d
# from starting anything; there is no systemd here either. Nothing listens afterwards.
set -euo pipefail

packages=(prometheus)

missing=()
for pkg in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$pkg")
	fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "hack/observability/packages.sh: all installed (${packages[*]})"
	exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
	echo "hack/observability/packages.sh: missing ${missing[*]}; run as root (apt-get install)" >&2
	exit 1
fi
echo "hack/observability/packages.sh: installing ${missing[*]}"
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
