#!/usr/bin/env bash
# The Debian packages the observability tests need (tests/observability); hack/debian-packages.sh
# installs those missing.
#
#   prometheus    promtool (`promtool test rules`, `promtool check rules`) and the prometheus server
#                 the dashboard test starts itself on 127.0.0.1 (Debian bookworm: 2.42)
#
# Debian's prometheus would start a service (and its recommend prometheus-node-exporter a second):
# the shared step installs without recommends and keeps both from starting; nothing listens afterwards.
set -euo pipefail
exec bash "$(dirname "$0")/../debian-packages.sh" hack/observability/packages.sh prometheus
