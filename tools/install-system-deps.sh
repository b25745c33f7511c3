#!/usr/bin/env bash
# Installs what the gates need from Debian, only when missing: make, shellcheck for ansible-test sanity (which
# otherwise skips its shellcheck test), and the en_US.UTF-8 locale (ansible-test warns that it falls back to C.UTF-8
# without it, and a clean run prints no warnings; Debian images often have C.UTF-8 alone).
set -euo pipefail
sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
missing=()
command -v make >/dev/null || missing+=(make)
command -v shellcheck >/dev/null || missing+=(shellcheck)
locale -a 2>/dev/null | grep -qix 'en_US.utf-\?8' || { [ -e /usr/share/i18n/locales/en_US ] || missing+=(locales); need_locale=1; }
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-system-deps: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ -n "${need_locale:-}" ]; then
  echo "install-system-deps: compiling the en_US.UTF-8 locale" >&2
  $sudo_cmd localedef -i en_US -f UTF-8 en_US.UTF-8
fi
