#!/usr/bin/env bash
# Installs the Debian packages the gates need, only when missing: make, shellcheck for ansible-test sanity (which
# otherwise skips its shellcheck test), and the locale sources that tools/ensure-locale.sh compiles.
set -euo pipefail
missing=()
command -v make >/dev/null || missing+=(make)
command -v shellcheck >/dev/null || missing+=(shellcheck)
command -v localedef >/dev/null && [ -e /usr/share/i18n/locales/en_US ] || missing+=(locales)
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-system-deps: installing ${missing[*]}" >&2
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
