#!/usr/bin/env bash
# Build the embedded control-plane binaries (etcd, kube-apiserver,
# kube-controller-manager, optionally kube-scheduler, kubelet, kube-proxy, fakegpu,
# coredns, helm, kwok, kuberay-operator, kueue, kstatus, crane, source-controller,
# kustomize-controller, argocd-application-controller and argocd-repo-server) from the Go module
# proxy into a per-version cache outside the repository.
# The missing binaries of one module are built by one `go build` (this module: etcd and every
# k8s.io/kubernetes command; helm/: helm and Flux's two controllers; argocd/: Argo CD's two), so
# their shared dependency graph is compiled and loaded once. A module whose go.mod has a
# `toolchain` line (argocd/: argo-cd v3.6 needs Go 1.27) is built with GOTOOLCHAIN set to it,
# which the go command fetches from the module proxy once.
#
# Idempotent: a binary that is already in the cache is not rebuilt (unless its build info records
# another version of its module than go.mod asks: module_for); concurrent runs take turns. Each
# binary is written to a temporary name and renamed into place, so an
# interrupted build never leaves a half-written binary behind.
#
# Usage: hack/controlplane/build.sh [--print-bin-dir] [BINARY...]
#   BINARY is one of: etcd kube-apiserver kube-controller-manager
#                     kube-scheduler kubelet kube-proxy helm kwok kuberay-operator
#                     kueue kstatus coredns fakegpu crane source-controller
#                     kustomize-controller argocd-application-controller
#                     argocd-repo-server
#   Default: etcd kube-apiserver kube-controller-manager
#
# Environment:
#   LORARL_CACHE     cache root (default: $HOME/.cache/lorarl)
#   BUILD_PARALLEL   go build -p value (default: 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' go.mod)"
if [[ -z "$k8s_version" ]]; then
	# `require k8s.io/kubernetes vX` on a single line
	k8s_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' go.mod)"
fi
if [[ -z "$k8s_version" ]]; then
	echo "build.sh: cannot find the k8s.io/kubernetes version in go.mod" >&2
	exit 1
fi

cache_root="${LORARL_CACHE:-$HOME/.cache/lorarl}"
bin_dir="$cache_root/controlplane/$k8s_version/bin"

if [[ "${1:-}" == "--print-bin-dir" ]]; then
	echo "$bin_dir"
	exit 0
fi

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
	targets=(etcd kube-apiserver kube-controller-manager)
fi

if ! command -v go >/dev/null 2>&1; then
	echo "build.sh: 'go' is not on PATH (Go >= 1.26 is needed to build the control plane)" >&2
	exit 1
fi

mkdir -p "$bin_dir"
# One build at a time per cache: a second caller (a test session started while .ci/run builds)
# waits here and then finds the binaries built, instead of compiling the same graph beside it.
exec {build_lock}>"$bin_dir/.build.lock"
flock "$build_lock"

ver="${k8s_version#v}"
major="${ver%%.*}"
rest="${ver#*.}"
minor="${rest%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_version"
	ldflags+=" -X $pkg.gitMajor=$major"
	ldflags+=" -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
	ldflags+=" -X $pkg.buildDate=$build_date"
done

parallel="${BUILD_PARALLEL:-2}"

helm_version="$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" {print $3; exit} $1 == "helm.sh/helm/v4" {print $2; exit}' helm/go.mod)"
ldflags_for() {
	case "$1" in
	helm) echo "-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.gitTreeState=clean" ;;
	kwok | kuberay-operator | kstatus | coredns | fakegpu | crane | source-controller | kustomize-controller) echo "-s -w" ;;
	kueue) echo "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$(version_for kueue)" ;;
	argocd-application-controller | argocd-repo-server)
		# as argo-cd's Makefile stamps them (LDFLAGS: common.version is the VERSION file's, no "v")
		local v
		v="$(version_for "$1")"
		echo "-s -w -X github.com/argoproj/argo-cd/v3/common.version=${v#v} -X github.com/argoproj/argo-cd/v3/common.gitTreeState=clean"
		;;
	*) echo "$ldflags" ;;
	esac
}
version_for() {
	case "$1" in
	helm) echo "$helm_version" ;;
	kwok) awk '$1 == "require" && $2 == "sigs.k8s.io/kwok" {print $3; exit}' kwok/go.mod ;;
	kuberay-operator) awk '$1 == "require" && $2 == "github.com/ray-project/kuberay/ray-operator" {print $3; exit}' kuberay/go.mod ;;
	kueue) awk '$1 == "require" && $2 == "sigs.k8s.io/kueue" {print $3; exit}' "$here/kueue/go.mod" ;;
	kstatus) awk '$1 == "sigs.k8s.io/cli-utils" {print $2; exit}' ../kstatus/go.mod ;;
	coredns) awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3; exit}' coredns/go.mod ;;
	etcd) awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' go.mod ;;
	crane) awk '$1 == "require" && $2 == "github.com/google/go-containerregistry" {print $3; exit}' crane/go.mod ;;
	source-controller | kustomize-controller) awk -v m="github.com/fluxcd/$1" '$1 == m {print $2; exit}' helm/go.mod ;;
	argocd-application-controller | argocd-repo-server) awk '$1 == "github.com/argoproj/argo-cd/v3" {print $2; exit} $1 == "require" && $2 == "github.com/argoproj/argo-cd/v3" {print $3; exit}' argocd/go.mod ;;
	*) echo "$k8s_version" ;;
	esac
}

# the module whose version names a binary built outside this module's k8s version (the bin dir is
# keyed by that only): a binary whose build info records another version of it is rebuilt, so a
# version bump in kuberay/go.mod (or kwok's, helm's, ...) takes effect on a machine that built the old one
module_for() {
	case "$1" in
	helm) echo "helm.sh/helm/v4" ;;
	kwok) echo "sigs.k8s.io/kwok" ;;
	kuberay-operator) echo "github.com/ray-project/kuberay/ray-operator" ;;
	kueue) echo "sigs.k8s.io/kueue" ;;
	kstatus) echo "sigs.k8s.io/cli-utils" ;;
	coredns) echo "github.com/coredns/coredns" ;;
	crane) echo "github.com/google/go-containerregistry" ;;
	source-controller | kustomize-controller) echo "github.com/fluxcd/$1" ;;
	argocd-application-controller | argocd-repo-server) echo "github.com/argoproj/argo-cd/v3" ;;
	*) return 1 ;;
	esac
}
# the version of that module the binary was built with (`go version -m`: its "mod" line when the
# command is in that module, kuberay-operator, kwok, ...; else its "dep" line)
built_version() {
	local mod
	mod="$(module_for "$1")" || return 0
	go version -m "$bin_dir/$1" 2>/dev/null | awk -v m="$mod" '($1 == "mod" || $1 == "dep") && $2 == m {print $3; exit}'
}

# name -> (module dir, package, cold-build estimate)
pkg_for() {
	case "$1" in
	etcd) echo "go.etcd.io/etcd/server/v3" ;;
	kube-apiserver) echo "k8s.io/kubernetes/cmd/kube-apiserver" ;;
	kube-controller-manager) echo "k8s.io/kubernetes/cmd/kube-controller-manager" ;;
	kube-scheduler) echo "k8s.io/kubernetes/cmd/kube-scheduler" ;;
	kubelet) echo "k8s.io/kubernetes/cmd/kubelet" ;;
	kube-proxy) echo "k8s.io/kubernetes/cmd/kube-proxy" ;;
	helm) echo "helm.sh/helm/v4/cmd/helm" ;;
	kwok) echo "sigs.k8s.io/kwok/cmd/kwok" ;;
	kuberay-operator) echo "github.com/ray-project/kuberay/ray-operator" ;;
	kueue) echo "sigs.k8s.io/kueue/cmd/kueue" ;;
	kstatus) echo "lorarl.dev/hack/kstatus" ;;
	coredns) echo "lorarl.dev/hack/controlplane/coredns" ;;
	fakegpu) echo "lorarl.dev/hack/controlplane/fakegpu" ;;
	crane) echo "github.com/google/go-containerregistry/cmd/crane" ;;
	source-controller | kustomize-controller) echo "github.com/fluxcd/$1" ;;
	argocd-application-controller | argocd-repo-server) echo "lorarl.dev/hack/controlplane/argocd/$1" ;;
	*) return 1 ;;
	esac
}
dir_for() {
	case "$1" in
	helm | source-controller | kustomize-controller) echo "$here/helm" ;;
	kwok) echo "$here/kwok" ;;
	kuberay-operator) echo "$here/kuberay" ;;
	kueue) echo "$here/kueue" ;;
	kstatus) echo "$here/../kstatus" ;;
	coredns) echo "$here/coredns" ;;
	crane) echo "$here/crane" ;;
	argocd-application-controller | argocd-repo-server) echo "$here/argocd" ;;
	*) echo "$here" ;;
	esac
}
estimate_for() {
	case "$1" in
	kube-apiserver) echo "cold build may take ~10 min on 2 cores" ;;
	kube-controller-manager) echo "~4 min after kube-apiserver, longer alone" ;;
	kube-scheduler) echo "~2 min after kube-apiserver" ;;
	kubelet) echo "~3 min after kube-apiserver" ;;
	kube-proxy) echo "~1 min after kube-apiserver" ;;
	etcd) echo "cold build may take ~2 min" ;;
	helm) echo "cold build may take ~2 min" ;;
	kwok) echo "cold build may take ~3 min" ;;
	kuberay-operator) echo "cold build may take ~4 min" ;;
	kueue) echo "cold build may take ~10 min on 2 busy cores" ;;
	kstatus) echo "cold build may take ~1 min" ;;
	coredns) echo "cold build may take ~4 min" ;;
	fakegpu) echo "~1 min after the kubelet" ;;
	crane) echo "cold build may take ~1 min" ;;
	source-controller | kustomize-controller) echo "cold, beside helm: Flux adds ~375 CPU-s, ~4 min on 2 free cores" ;;
	argocd-application-controller | argocd-repo-server) echo "cold, both: ~410 CPU-s with Go 1.27 from nothing, ~5 min on 2 busy cores" ;;
	esac
}

# go build runs in the background so that an INT/TERM/HUP to this script stops
# it (SIGINT makes the go command stop its compilers) and the partial output is
# removed; only finished binaries are renamed into place.
run_build() { # run_build DIR LDFLAGS OUT PKG...
	local dir="$1" flags="$2" outarg="$3"
	shift 3
	local toolchain
	toolchain="$(awk '$1 == "toolchain" {print $2; exit}' "$dir/go.mod")"
	(cd "$dir" && if [[ -n $toolchain ]]; then export GOTOOLCHAIN="$toolchain"; fi && exec go build -trimpath -p "$parallel" -ldflags "$flags" -o "$outarg" "$@") &
	local child=$!
	trap 'kill -INT "$child" 2>/dev/null; wait "$child" 2>/dev/null; rm -rf "$outarg"; echo "build.sh: interrupted" >&2; exit 130' INT TERM HUP
	local rc=0
	wait "$child" || rc=$?
	trap - INT TERM HUP
	return $rc
}

status=0
shared=() # missing binaries of this module: one go build
others=()
for name in "${targets[@]}"; do
	if ! pkg="$(pkg_for "$name")"; then
		echo "build.sh: unknown binary '$name'" >&2
		exit 2
	fi
	stale=""
	if [[ -x "$bin_dir/$name" ]]; then
		have="$(built_version "$name")"
		if [[ -n "$have" && "$have" != "$(version_for "$name")" ]]; then
			stale="built from $(module_for "$name") $have"
		fi
	fi
	if [[ -x "$bin_dir/$name" && -z "$stale" ]]; then
		echo "$name: up to date ($bin_dir/$name)"
	elif [[ -n "$stale" ]]; then
		echo "$name: $stale, go.mod asks $(version_for "$name"): rebuilding"
		others+=("$name")
	elif [[ "$(dir_for "$name")" == "$here" ]]; then
		shared+=("$name")
	else
		others+=("$name")
	fi
done

if [[ ${#shared[@]} -gt 0 ]]; then
	pkgs=()
	for name in "${shared[@]}"; do
		pkgs+=("$(pkg_for "$name")")
		echo "building $name $(version_for "$name") ($(estimate_for "$name"))..."
	done
	start=$(date +%s)
	tmpdir="$bin_dir/.build.$$"
	mkdir -p "$tmpdir"
	if [[ ${#shared[@]} -eq 1 ]]; then
		outarg="$tmpdir/${shared[0]}"
	else
		outarg="$tmpdir/" # go build -o DIR/ writes each command under its own name
	fi
	if run_build "$here" "$ldflags" "$outarg" "${pkgs[@]}"; then
		for name in "${shared[@]}"; do
			built="$tmpdir/$name"
			# etcd's package is go.etcd.io/etcd/server/v3: go names it "server" (the element
			# before the major-version suffix)
			[[ "$name" == etcd && ! -e "$built" ]] && built="$tmpdir/server"
			mv -f "$built" "$bin_dir/$name"
		done
		echo "built ${shared[*]} in $(($(date +%s) - start))s -> $bin_dir"
	else
		echo "build.sh: building ${shared[*]} failed" >&2
		status=1
	fi
	rm -rf "$tmpdir"
fi

# the other modules' binaries: one go build per module (helm/ builds helm and Flux's controllers)
declare -A built_dirs=()
for name in "${others[@]}"; do
	dir="$(dir_for "$name")"
	[[ -n "${built_dirs[$dir]:-}" ]] && continue
	built_dirs[$dir]=1
	group=()
	pkgs=()
	flags=""
	for other in "${others[@]}"; do
		[[ "$(dir_for "$other")" == "$dir" ]] || continue
		group+=("$other")
		pkgs+=("$(pkg_for "$other")")
		[[ " $flags " == *" $(ldflags_for "$other") "* ]] || flags+=" $(ldflags_for "$other")"
		echo "building $other $(version_for "$other") ($(estimate_for "$other"))..."
	done
	start=$(date +%s)
	tmpdir="$bin_dir/.build.$$"
	mkdir -p "$tmpdir"
	if [[ ${#group[@]} -eq 1 ]]; then
		outarg="$tmpdir/${group[0]}"
	else
		outarg="$tmpdir/" # each command under its package's last element: helm, source-controller, ...
	fi
	if run_build "$dir" "${flags# }" "$outarg" "${pkgs[@]}"; then
		for other in "${group[@]}"; do
			mv -f "$tmpdir/$other" "$bin_dir/$other"
		done
		echo "built ${group[*]} in $(($(date +%s) - start))s -> $bin_dir"
	else
		echo "build.sh: building ${group[*]} failed" >&2
		status=1
	fi
	rm -rf "$tmpdir"
done

# kwok needs Stage configs (fake node heartbeat, pod ready/complete/delete);
# take kwok's own "fast" stages from its module.
for name in "${targets[@]}"; do
	if [[ "$name" == kwok && -x "$bin_dir/kwok" ]]; then
		stages="$bin_dir/../kwok-stages.yaml"
		if [[ ! -s "$stages" ]]; then
			kwok_dir="$(cd kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
			: >"$stages.tmp.$$"
			for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
				pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
				{ echo "---"; cat "$kwok_dir/kustomize/stage/$f"; } >>"$stages.tmp.$$"
			done
			mv -f "$stages.tmp.$$" "$stages"
			echo "kwok stages -> $stages"
		fi
	fi
done

# KubeRay's CRDs are read straight from the Go module cache by
# lorarl_dev.kuberay.kuberay_crd_path(); warm that cache here so that the
# first test run needs no network.
kuberay="github.com/ray-project/kuberay/ray-operator@${LORARL_KUBERAY_VERSION:-$(version_for kuberay-operator)}"
if ! (cd "$HOME" && go mod download "$kuberay"); then
	echo "build.sh: go mod download $kuberay failed" >&2
	status=1
fi
exit $status
