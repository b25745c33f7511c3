#!/usr/bin/env bash
# ansible-test bootstraps pip in its sanity virtual environments with a get-pip.py downloaded from a
# host outside the package registries, unless a cached copy exists. This writes an equivalent there:
# pip from the standard library's ensurepip, then the requested packages from PyPI.
set -euo pipefail
src="$(python -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')/_internal/python_requirements.py"
version="$(grep -oE "pip='[0-9.]+'" "$src" | head -1 | cut -d"'" -f2)"
target="$HOME/.ansible/test/cache/get_pip_${version//./_}.py"
[ -f "$target" ] && exit 0
mkdir -p "$(dirname "$target")"
cat > "$target" <<'PY'
"""Offline stand-in for get-pip.py: ensurepip, then `pip install` of the requested packages."""
import subprocess
import sys

GET_PIP_ONLY_OPTIONS = {"--no-setuptools", "--no-wheel"}
# In a child process: ensurepip blanks pip's configuration in its own environment (PIP_CONFIG_FILE),
# and the install below needs the machine's pip configuration (index, certificates).
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
PY
