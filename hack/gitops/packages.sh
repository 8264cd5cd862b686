#!/usr/bin/env bash
# The Debian packages the GitOps tests need (tests/gitops); hack/debian-packages.sh installs those
# missing.
#
#   git            the tests' Git server (lorarl_dev.gitserver: git http-backend) and commits; Argo
#                  CD's repo server clones with the git command
#   redis-server   the cache Argo CD's application controller and repo server share (a Redis is not
#                  optional there); the harness starts its own on 127.0.0.1 (lorarl_dev.argocd)
#
# Debian's redis-server would start a service: the shared step keeps it from running; nothing
# listens afterwards.
set -euo pipefail
exec bash "$(dirname "$0")/../debian-packages.sh" hack/gitops/packages.sh git redis-server
