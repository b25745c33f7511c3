#!/usr/bin/env bash
# Builds (or reuses) the local control plane's binaries from the Go module proxy.
# They are cached outside the checkout, keyed by version, and rebuilt only when missing.
# Prints the binary directory on stdout; progress goes to stderr.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.33.13}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
CACHE_ROOT="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}"
BIN_DIR="$CACHE_ROOT/bin/k8s-$K8S_VERSION-kwok-$KWOK_VERSION"

log() { echo "build-binaries: $*" >&2; }

have_all() {
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kwok; do
    [ -x "$BIN_DIR/$b" ] || return 1
  done
}

if have_all; then
  log "reusing $BIN_DIR"
  echo "$BIN_DIR"
  exit 0
fi

mkdir -p "$BIN_DIR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export CGO_ENABLED=0 GOFLAGS=-mod=mod

# k8s.io/kubernetes replaces its staging modules with local folders, so `go install` cannot build it.
# A tools module that requires it and points every staging module at its published version can.
minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
staging_version="v0.${K8S_VERSION#v1.}"
gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
go_directive="$(awk '$1 == "go" {print $2; exit}' "$gomod")"
mkdir -p "$work/tools"
cd "$work/tools"
go mod init accelerators-gpu/control-plane-tools >/dev/null 2>&1
go mod edit -go="$go_directive" -require="k8s.io/kubernetes@$K8S_VERSION"
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
log "building kube-apiserver, kube-controller-manager, kube-scheduler (long on a cold cache)"
go build -trimpath -ldflags "$ldflags" -o "$work/out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler

log "building kwok $KWOK_VERSION"
GOBIN="$work/out" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

# Move into place last so an interrupted build never leaves a half-filled cache that looks complete.
mv "$work"/out/* "$BIN_DIR/"
log "built into $BIN_DIR"
echo "$BIN_DIR"
