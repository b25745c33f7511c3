#!/usr/bin/env bash
# Installs the Debian packages the local control plane needs (etcd), only when missing.
set -euo pipefail
missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
command -v make >/dev/null || missing+=(make)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-system-deps: installing ${missing[*]}" >&2
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
