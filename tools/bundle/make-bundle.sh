#!/usr/bin/env bash
# Builds the offline install bundle: everything a site with no network needs to run the collection.
#   collections/  accelerators.gpu and its dependency kubernetes.core, as collection tarballs
#   wheels/       the Python runtime (ansible-core, the kubernetes client and their dependencies) as wheels
#   requirements.txt, install.sh
# kubernetes.core is packed from the copy the `ansible` package installed (Galaxy is not needed), the wheels
# are those of this Python and platform: build the bundle where the Python version and architecture match
# the target's. Usage: make-bundle.sh [OUTPUT_DIR] (default .build/bundle); prints the tarball's path.
# Needs the project's virtual environment on PATH (ansible-galaxy, and the `ansible` package's collections).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(mkdir -p "${1:-$root/.build/bundle}" && cd "${1:-$root/.build/bundle}" && pwd)"
# The runtime's packages; their versions are the pins of requirements.txt.
RUNTIME_PACKAGES=(ansible-core kubernetes jsonpatch PyYAML Jinja2)

version="$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["version"])' "$root/galaxy.yml")"
name="accelerators-gpu-$version-bundle"
stage="$out/$name"
rm -rf "$stage" "$stage.tar.gz"
mkdir -p "$stage/collections" "$stage/wheels"

echo "make-bundle: collection accelerators.gpu $version" >&2
ansible-galaxy collection build --force --output-path "$stage/collections" "$root" >&2

# An installed collection keeps MANIFEST.json and FILES.json (every file with its checksum), which
# `ansible-galaxy collection install` verifies. The `ansible` package ships only part of the files (no tests,
# no docs), so FILES.json is cut to the files present, unchanged ones whose checksums it already lists, and
# MANIFEST.json gets that FILES.json's checksum.
python3 - "$stage/collections" <<'PY' >&2
import hashlib, importlib.util, io, json, os, sys, tarfile
path = importlib.util.find_spec("ansible_collections.kubernetes.core").submodule_search_locations[0]
manifest = json.load(open(os.path.join(path, "MANIFEST.json")))
files = json.load(open(os.path.join(path, "FILES.json")))
files["files"] = [entry for entry in files["files"] if os.path.lexists(os.path.join(path, entry["name"]))]
files_json = json.dumps(files, indent=4).encode()
manifest["file_manifest_file"]["chksum_sha256"] = hashlib.sha256(files_json).hexdigest()
info = manifest["collection_info"]
target = os.path.join(sys.argv[1], "%s-%s-%s.tar.gz" % (info["namespace"], info["name"], info["version"]))
with tarfile.open(target, "w:gz") as tar:
    for name, data in (("MANIFEST.json", json.dumps(manifest, indent=4).encode()), ("FILES.json", files_json)):
        member = tarfile.TarInfo(name)
        member.size, member.mode = len(data), 0o644
        tar.addfile(member, io.BytesIO(data))
    for entry in files["files"]:
        if entry["name"] != ".":
            tar.add(os.path.join(path, entry["name"]), arcname=entry["name"], recursive=False)
print("make-bundle: collection %s.%s %s from %s (%d files)" % (
    info["namespace"], info["name"], info["version"], path, len(files["files"]) - 1))
PY

for package in "${RUNTIME_PACKAGES[@]}"; do
  grep -iE "^${package}==" "$root/requirements.txt" || { echo "make-bundle: no pin for $package in requirements.txt" >&2; exit 1; }
done > "$stage/requirements.txt"
echo "make-bundle: wheels of $(paste -sd' ' "$stage/requirements.txt") and their dependencies" >&2
python3 -m pip download --quiet --only-binary=:all: --dest "$stage/wheels" -r "$stage/requirements.txt" >&2

cp "$root/tools/bundle/install.sh" "$stage/install.sh"
chmod +x "$stage/install.sh"
tar -czf "$stage.tar.gz" -C "$out" "$name"
echo "make-bundle: $(du -sh "$stage.tar.gz" | cut -f1) in $stage.tar.gz" >&2
echo "$stage.tar.gz"
