#!/usr/bin/env bash
# Fetches (or reuses) the upstream CRDs the local control plane registers as they are: OLM's from
# github.com/operator-framework/api (its crds package embeds them) and the Prometheus Operator's from
# github.com/prometheus-operator/prometheus-operator (example/prometheus-operator-crd), through the Go module proxy.
# They are cached outside the checkout, keyed by version, like the control-plane binaries (build-binaries.sh).
# Prints the CRD directory on stdout; progress goes to stderr.
set -euo pipefail

OLM_API_VERSION="${OLM_API_VERSION:-v0.31.0}"
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
CACHE_ROOT="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}"
CRD_DIR="$CACHE_ROOT/crds/olm-api-$OLM_API_VERSION-prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
# The files taken from each module.
OLM_FILES="operators.coreos.com_subscriptions.yaml operators.coreos.com_operatorgroups.yaml operators.coreos.com_clusterserviceversions.yaml"
MONITORING_FILES="monitoring.coreos.com_servicemonitors.yaml monitoring.coreos.com_prometheusrules.yaml"

log() { echo "fetch-crds: $*" >&2; }

missing() {
  local f
  for f in $OLM_FILES $MONITORING_FILES; do
    [ -s "$CRD_DIR/$f" ] || return 0
  done
  return 1
}

if ! missing; then
  log "reusing $CRD_DIR"
  echo "$CRD_DIR"
  exit 0
fi

# The directory of module@version in the module cache, downloaded from the proxy when missing.
module_dir() {
  go mod download -json "$1" | python3 -c 'import json,sys; d = json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error")))'
}

log "fetching the OLM and Prometheus Operator CRDs the local cluster serves, from the Go module proxy into $CRD_DIR," \
  "once; seconds"
mkdir -p "$CACHE_ROOT/crds"
# Beside the cache directory, so that the last step is a rename.
work="$(mktemp -d "$CACHE_ROOT/crds/.fetch-XXXXXX")"
trap 'rm -rf "$work"' EXIT
olm="$(module_dir "github.com/operator-framework/api@$OLM_API_VERSION")"
monitoring="$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")"
for f in $OLM_FILES; do
  cp "$olm/crds/$f" "$work/"
done
for f in $MONITORING_FILES; do
  cp "$monitoring/example/prometheus-operator-crd/$f" "$work/"
done
chmod 644 "$work"/*.yaml
# Move into place last so an interrupted fetch never leaves a half-filled cache that looks complete.
rm -rf "$CRD_DIR"
mv "$work" "$CRD_DIR"
chmod 755 "$CRD_DIR"
trap - EXIT
log "fetched into $CRD_DIR"
echo "$CRD_DIR"
