#!/usr/bin/env bash
# Builds (or reuses) the test registry's binaries from the Go module proxy: the CNCF distribution
# registry and go-containerregistry's crane (the push client). Cached outside the checkout beside the
# control-plane binaries, keyed by version. Prints the binary directory on stdout; progress on stderr.
set -euo pipefail

DISTRIBUTION_VERSION="${DISTRIBUTION_VERSION:-v3.1.2}"
CRANE_VERSION="${CRANE_VERSION:-v0.22.1}"
CACHE_ROOT="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}"
BIN_DIR="$CACHE_ROOT/bin/distribution-$DISTRIBUTION_VERSION-crane-$CRANE_VERSION"

if [ -x "$BIN_DIR/registry" ] && [ -x "$BIN_DIR/crane" ]; then
  echo "build-registry: reusing $BIN_DIR" >&2
  echo "$BIN_DIR"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "build-registry: the registry tests need the distribution registry $DISTRIBUTION_VERSION and crane" \
  "$CRANE_VERSION, not built yet: building them from the Go module proxy into $BIN_DIR, once; about 4 minutes on 2 cores" >&2
export CGO_ENABLED=0 GOBIN="$work/out"
go install -trimpath -ldflags "-s -w" "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
go install -trimpath -ldflags "-s -w" "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"

# Move into place last so an interrupted build never leaves a half-filled cache that looks complete.
mkdir -p "$BIN_DIR"
mv "$work"/out/* "$BIN_DIR/"
echo "build-registry: built into $BIN_DIR" >&2
echo "$BIN_DIR"
