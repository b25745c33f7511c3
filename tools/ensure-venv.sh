#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment, cached outside the checkout and keyed by
# the hash of requirements.txt, so warm runs on a fresh clone install nothing. Prints its path.
# An optional argument names another requirements file (tools/docs-requirements.txt: the docs
# tooling), which gets a virtual environment of its own, keyed the same way.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
requirements="${1:-$here/requirements.txt}"
cache_root="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}"
key="$(sha256sum "$requirements" | cut -c1-16)"
venv="$cache_root/venv-$key"
if [ ! -x "$venv/bin/ansible-playbook" ] || [ ! -f "$venv/.complete" ]; then
  echo "ensure-venv: installing $(basename "$requirements") into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements" >&2
  touch "$venv/.complete"
fi
echo "$venv"
