#!/usr/bin/env bash
# Fetches (or reuses) the NVIDIA GPU Operator's operand manifests (assets/state-* and assets/gpu-feature-discovery of
# github.com/NVIDIA/gpu-operator) through the Go module proxy, which the unit tests compare the golden DaemonSets with
# (tests/unit/golden/upstream.py). Cached outside the checkout, keyed by version, like the upstream CRDs
# (tools/localcluster/fetch-crds.sh); never copied into the repository. GPU_OPERATOR_VERSION is the pseudo-version
# `go mod download -json github.com/NVIDIA/gpu-operator@latest` gave when the comparison was last reviewed.
# Prints the assets directory on stdout; progress goes to stderr. With --cached it fetches nothing and fails when the
# assets are not in the cache.
set -euo pipefail

GPU_OPERATOR_VERSION="${GPU_OPERATOR_VERSION:-v0.0.0-20250917190837-d73a0086a6ba}"
CACHE_ROOT="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}"
ASSETS_DIR="$CACHE_ROOT/gpu-operator/$GPU_OPERATOR_VERSION/assets"

log() { echo "fetch-gpu-operator: $*" >&2; }

if [ -d "$ASSETS_DIR" ]; then
  echo "$ASSETS_DIR"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  log "the GPU Operator's assets $GPU_OPERATOR_VERSION are not in $CACHE_ROOT/gpu-operator: run make deps"
  exit 1
fi

mkdir -p "$CACHE_ROOT/gpu-operator"
# Beside the cache directory, so that the last step is a rename.
work="$(mktemp -d "$CACHE_ROOT/gpu-operator/.fetch-XXXXXX")"
trap 'rm -rf "$work"' EXIT
source_dir="$(go mod download -json "github.com/NVIDIA/gpu-operator@$GPU_OPERATOR_VERSION" \
  | python3 -c 'import json,sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))')"
mkdir -p "$work/assets"
cp -r "$source_dir"/assets/state-* "$source_dir/assets/gpu-feature-discovery" "$work/assets/"
chmod -R u+w,go-w "$work/assets"
mkdir -p "$(dirname "$ASSETS_DIR")"
# Move into place last so an interrupted fetch never leaves a half-filled cache that looks complete.
mv "$work/assets" "$ASSETS_DIR"
log "fetched into $ASSETS_DIR"
echo "$ASSETS_DIR"
