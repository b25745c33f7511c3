"""A real OCI registry on 127.0.0.1 for tests: the CNCF distribution registry with TLS from a CA made here
and htpasswd basic auth, filled with small images pushed by go-containerregistry's crane (no Docker).

    with LocalRegistry(tmp_path) as registry:
        registry.push("nvidia/driver", ["535-5.14.0-427.33.1.el9_4.x86_64-rhcos4.18"])
        registry.host            # '127.0.0.1:PORT'
        registry.ca_file         # the CA that signed the serving certificate
        registry.pull_secret()   # a dockerconfigjson dict for registry.user
"""

import base64
import os
import secrets
import signal
import ssl
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import yaml

from localcluster.controlplane import _cert, _key, _pem_key, free_port

TOOLS = Path(__file__).resolve().parents[1]
# OCI index of one OCI manifest; crane pushes Docker schema 2 manifests unless told otherwise.
MEDIA_TYPES = ("docker", "oci", "oci-index")


class RegistryError(RuntimeError):
    pass


def build_binaries():
    """The directory holding `registry` and `crane`, built from the Go module proxy on first use."""
    result = subprocess.run(["bash", str(TOOLS / "localregistry" / "build-binaries.sh")],
                            stdout=subprocess.PIPE, check=True, text=True)
    return Path(result.stdout.strip().splitlines()[-1])


class LocalRegistry:
    """One registry process serving workdir/storage; user (a random password) may pull and push."""

    def __init__(self, workdir, user="puller"):
        self.workdir = Path(workdir)
        self.user = user
        self.password = secrets.token_hex(12)
        self.port = None
        self.process = None
        self.bin_dir = None

    @property
    def host(self):
        return "127.0.0.1:%d" % self.port

    @property
    def ca_file(self):
        return str(self.workdir / "ca.crt")

    def pull_secret(self, user=None, password=None):
        """A dockerconfigjson document (as in a kubernetes.io/dockerconfigjson Secret) for this registry."""
        auth = base64.b64encode(("%s:%s" % (user or self.user, password or self.password)).encode()).decode()
        return {"auths": {self.host: {"auth": auth}}}

    # -- start and stop ------------------------------------------------------------------------
    def start(self, timeout=30):
        self.bin_dir = build_binaries()
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca_key, server_key = _key(), _key()
        (self.workdir / "ca.crt").write_bytes(_cert("accelerators-gpu-test-registry-ca", ca_key,
                                                    "accelerators-gpu-test-registry-ca", ca_key, ca=True))
        (self.workdir / "server.crt").write_bytes(_cert("registry", server_key,
                                                        "accelerators-gpu-test-registry-ca", ca_key))
        (self.workdir / "server.key").write_bytes(_pem_key(server_key))
        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
        (self.workdir / "htpasswd").write_text("%s:%s\n" % (self.user, hashed))
        self.port = free_port()
        config = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "storage")}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16),
                     "tls": {"certificate": str(self.workdir / "server.crt"),
                             "key": str(self.workdir / "server.key")}},
            "auth": {"htpasswd": {"realm": "accelerators-gpu-test", "path": str(self.workdir / "htpasswd")}},
        }
        (self.workdir / "config.yml").write_text(yaml.safe_dump(config))
        with open(self.workdir / "registry.log", "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "registry"), "serve", str(self.workdir / "config.yml")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready(timeout)
        self._crane("auth", "login", self.host, "-u", self.user, "--password-stdin", stdin=self.password)
        return self

    def _wait_ready(self, timeout):
        context = ssl.create_default_context(cafile=self.ca_file)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RegistryError("registry exited (code %s): see %s" % (
                    self.process.returncode, self.workdir / "registry.log"))
            try:
                urllib.request.urlopen("https://%s/v2/" % self.host, context=context, timeout=5)
            except urllib.error.HTTPError as error:
                if error.code == 401:  # serving, and asking for credentials
                    return
                last = error
            except OSError as error:  # not listening yet
                last = error
            time.sleep(0.2)
        raise RegistryError("registry not ready after %ds (%s): see %s" % (
            timeout, last, self.workdir / "registry.log"))

    def stop(self):
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- content -------------------------------------------------------------------------------
    def _crane(self, *args, stdin=None):
        env = dict(os.environ, DOCKER_CONFIG=str(self.workdir / "docker"), SSL_CERT_FILE=self.ca_file)
        result = subprocess.run([str(self.bin_dir / "crane")] + list(args), input=stdin, env=env,
                                capture_output=True, text=True, check=False)
        if result.returncode:
            raise RegistryError("crane %s failed: %s" % (args[0], result.stderr.strip()))
        return result.stdout.strip()

    def push(self, repository, tags, media_type="docker"):
        """Push one tiny image (an empty layer) to repository under each tag; returns its digest.

        media_type: 'docker' (schema 2 manifest), 'oci' (OCI manifest) or 'oci-index' (an OCI index of one).
        """
        if media_type not in MEDIA_TYPES:
            raise ValueError("media_type %r is not one of %s" % (media_type, ", ".join(MEDIA_TYPES)))
        layer = self.workdir / "empty-layer.tar"
        if not layer.exists():
            tarfile.open(layer, "w").close()
        first = "%s/%s:%s" % (self.host, repository, tags[0])
        if media_type == "oci-index":
            child = "%s/%s:%s-manifest" % (self.host, repository, tags[0])
            self._crane("append", "--oci-empty-base", "-f", str(layer), "-t", child)
            self._crane("index", "append", "-m", child, "-t", first)
        else:
            self._crane("append", "-f", str(layer), "-t", first,
                        *(["--oci-empty-base"] if media_type == "oci" else []))
        for tag in tags[1:]:
            self._crane("tag", first, tag)
        return self._crane("digest", first)
