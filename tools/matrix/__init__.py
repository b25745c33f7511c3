"""The support matrix: ansible-core, Python and kubernetes client combinations the collection is tested on.

Each combination is a requirements file beside this module, a Python version and a kubernetes.core version. Its virtual environment is made on
demand with an interpreter of that version found on this machine (PATH, /usr/bin, /usr/local/bin, pyenv's
versions), cached outside the checkout like the default one (tools/ensure-venv.sh) and keyed by the requirements,
the interpreter's exact version and the kubernetes.core pin. kubernetes.core is not on PyPI on its own and Galaxy may
be out of reach: it is taken from an `ansible` wheel that carries that version (pip download --no-deps, once per
version, cached) and copied into the environment's site-packages, where ansible-core and plain Python imports find it
as they do in the default environment.

MATRIX selects the combinations: `ci` (the default: the oldest and the newest, which CI runs), `all`, or names
separated by commas.
"""

import collections
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = Path(os.environ.get("ACCEL_GPU_CACHE") or
             os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "accelerators-gpu"))

# kubernetes.core versions and an `ansible` release that carries each (its wheel is the only source on PyPI).
# 6.1.0: the oldest 6.x on PyPI (ansible 12.0.0; 6.0.0 went out in no ansible release).
# 6.2.0: the default environment's (ansible 12.3.0 in requirements.txt).
# 6.6.0: the newest 6.x (ansible 14.5.0). ansible-core 2.20 and later need 6.3.0 or later for output without
# deprecation warnings: kubernetes.core imported ansible.module_utils._text (deprecated, removed in ansible-core 2.24)
# until 6.3.0 (its changelog: "Remove deprecated import from ansible.module_utils._text", pull 1053).
KUBERNETES_CORE = {"6.1.0": "ansible==12.0.0", "6.2.0": "ansible==12.3.0", "6.6.0": "ansible==14.5.0"}

Combination = collections.namedtuple("Combination", "name python requirements kubernetes_core ci description")

COMBINATIONS = [
    Combination("oldest", "3.11", "oldest.txt", "6.1.0", True,
                "ansible-core 2.16, Python 3.11, kubernetes 24.2.0, kubernetes.core 6.1.0"),
    Combination("core216-client37", "3.11", "core216-client37.txt", "6.6.0", False,
                "ansible-core 2.16, Python 3.11, kubernetes 37, kubernetes.core 6.6.0"),
    Combination("core219-client37", "3.11", "core219-client37.txt", "6.2.0", False,
                "ansible-core 2.19, Python 3.11, kubernetes 37, kubernetes.core 6.2.0"),
    Combination("core220-client37", "3.12", "core220-client37.txt", "6.6.0", False,
                "ansible-core 2.20, Python 3.12, kubernetes 37, kubernetes.core 6.6.0"),
    Combination("newest", "3.13", "newest.txt", "6.6.0", True,
                "ansible-core 2.21, Python 3.13, kubernetes 37, kubernetes.core 6.6.0"),
]


class MatrixError(RuntimeError):
    pass


class NoInterpreter(MatrixError):
    """This machine has no Python of the combination's version: the combination is skipped, saying so."""


def selected(value=None):
    """The combinations MATRIX (or value) names: ci, all, or names separated by commas."""
    value = (value if value is not None else os.environ.get("MATRIX", "")).strip() or "ci"
    if value == "ci":
        return [c for c in COMBINATIONS if c.ci]
    if value == "all":
        return list(COMBINATIONS)
    by_name = {c.name: c for c in COMBINATIONS}
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise MatrixError("MATRIX names no combination %s: ci, all or some of %s"
                          % (", ".join(unknown), ", ".join(by_name)))
    return [by_name[name] for name in names]


def pins(combination):
    """{package: version} of the combination's requirements file."""
    text = (HERE / combination.requirements).read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M))


# The interpreter's version and, for a virtual environment's Python (PATH may lead to one), the interpreter it was made
# from: the combination's environment is made from that.
_PROBE = ("import sys, venv, ensurepip; print('%d.%d.%d' % sys.version_info[:3]); "
          "print(getattr(sys, '_base_executable', sys.executable) if sys.prefix != sys.base_prefix else sys.executable)")


def _candidates(version):
    name = "python" + version
    seen = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        seen.append(os.path.join(directory, name))
    seen += ["/usr/bin/" + name, "/usr/local/bin/" + name, "/usr/bin/python3"]
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    # The newest patch release first.
    versions = glob.glob(os.path.join(pyenv_root, "versions", version + ".*", "bin", name))
    seen += sorted(versions, key=lambda p: [int(x) if x.isdigit() else -1 for x in re.split(r"[.-]", p.split(
        os.sep)[-3])], reverse=True)
    unique = []
    for path in seen:
        if path not in unique and os.path.isfile(path) and os.access(path, os.X_OK):
            unique.append(path)
    return unique


def find_interpreter(version):
    """(path, exact version) of a Python `version` (3.11...) that runs and can make a virtual environment, or
    (None, why not)."""
    tried = []
    for path in _candidates(version):
        try:
            probe = subprocess.run([path, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False)
        except OSError as error:
            tried.append("%s: %s" % (path, error))
            continue
        lines = probe.stdout.split()
        if probe.returncode != 0 or len(lines) != 2:
            tried.append("%s: does not run with venv and ensurepip (%s)" % (
                path, (probe.stderr.strip().splitlines() or ["rc %d" % probe.returncode])[-1]))
        elif not lines[0].startswith(version + "."):
            tried.append("%s: is Python %s" % (path, lines[0]))
        else:
            return lines[1], lines[0]
    return None, "no Python %s on this machine (PATH, /usr/bin, /usr/local/bin, pyenv versions)%s" % (
        version, ": " + "; ".join(tried) if tried else "")


def kubernetes_core(version, pip):
    """The directory holding ansible_collections/kubernetes/core at version, extracted once (pip: the pip of a Python
    the `ansible` release installs on)."""
    wheel_pin = KUBERNETES_CORE[version]
    target = CACHE / ("kubernetes.core-%s" % version)
    collection = target / "ansible_collections" / "kubernetes" / "core"
    if (target / ".complete").exists():
        return target
    with _lock(target):
        if (target / ".complete").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="matrix-wheel-") as download:
            subprocess.run([str(pip), "download", "-q", "--disable-pip-version-check", "--no-deps",
                            "-d", download, wheel_pin], check=True, stdout=sys.stderr)
            (wheel,) = glob.glob(os.path.join(download, "*.whl"))
            prefix = "ansible_collections/kubernetes/core/"
            with zipfile.ZipFile(wheel) as archive:
                members = [m for m in archive.namelist() if m.startswith(prefix)]
                if not members:
                    raise MatrixError("%s carries no kubernetes.core" % wheel_pin)
                archive.extractall(target, members)
        manifest = json.loads((collection / "MANIFEST.json").read_text())["collection_info"]
        if manifest["version"] != version:
            raise MatrixError("%s carries kubernetes.core %s, not %s" % (wheel_pin, manifest["version"], version))
        (target / ".complete").touch()
    return target


class _lock:
    """An exclusive lock beside path, so that two processes do not build the same thing at once."""

    def __init__(self, path):
        self.path = str(path) + ".lock"

    def __enter__(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.handle = open(self.path, "w")
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()


def venv_path(combination, interpreter_version):
    digest = hashlib.sha256()
    digest.update((HERE / combination.requirements).read_bytes())
    digest.update(interpreter_version.encode())
    digest.update(("kubernetes.core %s from %s" % (combination.kubernetes_core,
                                                   KUBERNETES_CORE[combination.kubernetes_core])).encode())
    return CACHE / ("matrix-%s-%s" % (combination.name, digest.hexdigest()[:16]))


def ensure_venv(combination, log=sys.stderr):
    """The combination's virtual environment, made if missing. Raises MatrixError when its Python is missing."""
    python, version = find_interpreter(combination.python)
    if python is None:
        raise NoInterpreter(version)
    venv = venv_path(combination, version)
    if (venv / ".complete").exists():
        return venv
    with _lock(venv):
        if (venv / ".complete").exists():
            return venv
        print("matrix: installing %s into %s with %s (Python %s)" % (combination.requirements, venv, python, version),
              file=log)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True, stdout=log)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        "-r", str(HERE / combination.requirements)], check=True, stdout=log)
        site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip()
        source = kubernetes_core(combination.kubernetes_core, venv / "bin" / "pip") / "ansible_collections" / \
            "kubernetes" / "core"
        shutil.copytree(source, os.path.join(site, "ansible_collections", "kubernetes", "core"), symlinks=True)
        (venv / ".complete").touch()
    return venv


def installed(venv):
    """{package: version} of the packages that matter, as the environment reports them, and kubernetes.core's."""
    script = ("import json, importlib.metadata as m, sys, pathlib, ansible_collections.kubernetes.core as k\n"
              "out = {p: m.version(p) for p in ('ansible-core', 'kubernetes', 'urllib3', 'pytest')}\n"
              "out['python'] = '%d.%d.%d' % sys.version_info[:3]\n"
              "manifest = pathlib.Path(list(k.__path__)[0], 'MANIFEST.json')\n"
              "out['kubernetes.core'] = json.loads(manifest.read_text())['collection_info']['version']\n"
              "print(json.dumps(out))")
    result = subprocess.run([str(Path(venv) / "bin" / "python"), "-c", script], capture_output=True, text=True,
                            check=True, env=dict(os.environ, PYTHONPATH=""))
    return json.loads(result.stdout)
