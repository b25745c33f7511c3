#!/usr/bin/env bash
# Creates (or reuses) the project's virtual environment, cached outside the checkout and keyed by
# the hash of requirements.txt, so warm runs on a fresh clone install nothing. Prints its path.
# An optional argument names another requirements file (tools/docs-requirements.txt: the docs
# tooling), which gets a virtual environment of its own, keyed the same way.
# --path first: only print where it is, made or not (the Makefile's PATH, before the venv target makes it).
set -euo pipefail
path_only=""
if [ "${1:-}" = "--path" ]; then path_only=1; shift; fi
here="$(cd "$(dirname "$0")/.." && pwd)"
requirements="${1:-$here/requirements.txt}"
cache_root="${ACCEL_GPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/accelerators-gpu}"
key="$(sha256sum "$requirements" | cut -c1-16)"
venv="$cache_root/venv-$key"
if [ -z "$path_only" ] && { [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; }; then
  echo "ensure-venv: no Python environment for this $(basename "$requirements") yet: installing it from PyPI into $venv," \
    "once; about half a minute" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  # No bytecode: the Makefile keeps it under PYTHONPYCACHEPREFIX, where Python looks instead of __pycache__, so pip's
  # would never be read (compiling the 19,500 files of requirements.txt doubled the install's CPU time).
  "$venv/bin/pip" install -q --disable-pip-version-check --no-compile -r "$requirements" >&2
  touch "$venv/.complete"
fi
echo "$venv"
