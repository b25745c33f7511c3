#!/usr/bin/env bash
# Installs the accelerators.gpu offline bundle into TARGET with no network: a virtual environment from the
# bundle's wheels (pip --no-index) and the bundle's collections (ansible-galaxy --offline, no Galaxy).
# Usage: ./install.sh TARGET  (PYTHON selects the interpreter, python3 by default; it must be the Python
# version the bundle was built with). Prints the two variables that make ansible-playbook use the install.
set -euo pipefail
bundle="$(cd "$(dirname "$0")" && pwd)"
target="${1:?usage: install.sh TARGET}"
mkdir -p "$target"
target="$(cd "$target" && pwd)"

"${PYTHON:-python3}" -m venv "$target/venv"
"$target/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index \
  --find-links "$bundle/wheels" -r "$bundle/requirements.txt" >&2
ANSIBLE_COLLECTIONS_PATH="$target/collections" "$target/venv/bin/ansible-galaxy" collection install --offline \
  --collections-path "$target/collections" "$bundle"/collections/*.tar.gz >&2

echo "export PATH=$target/venv/bin:\$PATH ANSIBLE_COLLECTIONS_PATH=$target/collections"
