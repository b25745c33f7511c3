#!/usr/bin/env bash
# Builds (or reuses) the local control plane's binaries from the Go module proxy.
# They are cached outside the checkout, keyed by version, and rebuilt only when missing.
# Prints the binary directory on stdout; progress goes to stderr.
set -euo pipefail

# 1.34: Dynamic Resource Allocation GA (resource.k8s.io/v1), which the DRA stack needs. K8S_VERSION=v1.33.13 still
# builds the previous control plane (cached beside it).
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
# etcd 3.5, which Kubernetes 1.34 supports (1.33 ships with it). Debian's 3.4 lacks the watch progress requests that
# let the API server answer a consistent list from its watch cache, so every list would be read from etcd, decoded in
# full and filtered: ten times the CPU of a real cluster's API server on a list of pods selected by label.
ETCD_VERSION="${ETCD_VERSION:-v3.5.21}"
CACHE_ROOT="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}"
BIN_DIR="$CACHE_ROOT/bin/k8s-$K8S_VERSION-kwok-$KWOK_VERSION-etcd-$ETCD_VERSION"
KUBE_BINARIES="kube-apiserver kube-controller-manager kube-scheduler"

log() { echo "build-binaries: $*" >&2; }

# The path of the go.mod of module@version, from the proxy.
go_mod_of() {
  go mod download -json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])'
}

# The go directive of a go.mod: a module built with it keeps that Go version's GODEBUG defaults.
go_directive() {
  awk '$1 == "go" {print $2; exit}' "$1"
}

missing() {
  local b
  for b in "$@"; do
    [ -x "$BIN_DIR/$b" ] || return 0
  done
  return 1
}

# shellcheck disable=SC2086  # the lists are words
if ! missing $KUBE_BINARIES kwok etcd; then
  log "reusing $BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi

# Each build's seconds: a cold build on the 2-core machine of 2026-12-01 (docs/docsite/rst/development.rst).
log "the local control plane (make demo, the cluster tests) has no binaries of these versions yet: building them from" \
  "the Go module proxy into $BIN_DIR, once; about 9 minutes on 2 cores"
mkdir -p "$BIN_DIR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/out"
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# etcd's server module replaces its sibling modules with local folders too, but only for its own builds: required
# from a module of ours, they come from the proxy at the versions it requires.
if missing etcd; then
  log "building etcd $ETCD_VERSION (about 1 minute)"
  mkdir -p "$work/etcd"
  (cd "$work/etcd" && go mod init accelerators-gpu/etcd >/dev/null 2>&1 &&
    go mod edit -go="$(go_directive "$(go_mod_of "go.etcd.io/etcd/server/v3@$ETCD_VERSION")")" \
      -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
    go build -trimpath -ldflags "-s -w" -o "$work/out/etcd" go.etcd.io/etcd/server/v3)
fi

# shellcheck disable=SC2086
if missing $KUBE_BINARIES; then

  # k8s.io/kubernetes replaces its staging modules with local folders, so `go install` cannot build it.
  # A tools module that requires it and points every staging module at its published version can.
  minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  staging_version="v0.${K8S_VERSION#v1.}"
  gomod="$(go_mod_of "k8s.io/kubernetes@$K8S_VERSION")"
  mkdir -p "$work/tools"
  cd "$work/tools"
  go mod init accelerators-gpu/control-plane-tools >/dev/null 2>&1
  go mod edit -go="$(go_directive "$gomod")" -require="k8s.io/kubernetes@$K8S_VERSION"
  # Keep the upstream GODEBUG defaults: they change TLS and x509 behaviour.
  grep -E '^godebug' "$gomod" | sed 's/^godebug //' | while read -r setting; do
    go mod edit -godebug="$setting"
  done
  staging="$(grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" | awk '{print $1}')"
  log "k8s $K8S_VERSION: $(echo "$staging" | wc -l) staging modules at $staging_version"
  for m in $staging; do
    go mod edit -replace="$m=$m@$staging_version"
  done

  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  log "building kube-apiserver, kube-controller-manager, kube-scheduler (about 5 minutes)"
  go build -trimpath -ldflags "$ldflags" -o "$work/out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler

fi

if missing kwok; then
  log "building kwok $KWOK_VERSION (about 3 minutes)"
  GOBIN="$work/out" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi

# Move into place last so an interrupted build never leaves a half-filled cache that looks complete.
mv "$work"/out/* "$BIN_DIR/"
log "built into $BIN_DIR"
echo "$BIN_DIR"
