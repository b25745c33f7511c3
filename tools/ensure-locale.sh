#!/usr/bin/env bash
# ansible-test warns that it uses C.UTF-8 unless en_US.UTF-8 exists, and a clean run prints no warnings. Debian images
# often have C.UTF-8 alone: en_US.UTF-8 is compiled once from the locales package's sources into the cache (no root
# needed, the system untouched). Prints the directory to give as LOCPATH.
set -euo pipefail
dir="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}/locale"
if [ ! -e "$dir/en_US.UTF-8/LC_CTYPE" ]; then
  mkdir -p "$dir"
  localedef -i en_US -f UTF-8 "$dir/en_US.UTF-8"
fi
echo "$dir"
