"""A real OCI registry on 127.0.0.1 for tests: the CNCF distribution registry with TLS from a CA made here
and either htpasswd basic auth or the bearer-token flow of Docker's token specification (a token service run
here issues the JWTs the registry verifies), filled with small images pushed by go-containerregistry's crane
(no Docker).

    with LocalRegistry(tmp_path) as registry:      # LocalRegistry(tmp_path, auth="token") for bearer tokens
        registry.push("nvidia/driver", ["535-5.14.0-427.33.1.el9_4.x86_64-rhcos4.18"])
        registry.host            # '127.0.0.1:PORT'
        registry.ca_file         # the CA that signed the serving certificate
        registry.pull_secret()   # a dockerconfigjson dict for registry.user
"""

import base64
import json
import os
import secrets
import signal
import ssl
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from localcluster.controlplane import _cert, _key, _pem_key, free_port

TOOLS = Path(__file__).resolve().parents[1]
# OCI index of one OCI manifest; crane pushes Docker schema 2 manifests unless told otherwise.
MEDIA_TYPES = ("docker", "oci", "oci-index")
AUTH_MODES = ("htpasswd", "token")
CA_NAME = "accelerators-gpu-test-registry-ca"
SERVICE = "accelerators-gpu-test-registry"
ISSUER = "accelerators-gpu-test-token-service"


class RegistryError(RuntimeError):
    pass


def build_binaries():
    """The directory holding `registry` and `crane`, built from the Go module proxy on first use."""
    result = subprocess.run(["bash", str(TOOLS / "localregistry" / "build-binaries.sh")],
                            stdout=subprocess.PIPE, check=True, text=True)
    return Path(result.stdout.strip().splitlines()[-1])


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """The token endpoint of a registry in token mode, on its own loopback port and thread.

    GET /token?service=...&scope=repository:NAME:ACTIONS with the user's Basic credentials answers
    {"token": JWT} granting those actions; anything else answers 401. The JWT is signed (RS256) by a key whose
    certificate rides in its x5c header and is the registry's rootcertbundle. issued counts the tokens given.
    """

    def __init__(self, workdir, user, password, server_cert, server_key):
        self.user, self.password = user, password
        self.issued = 0
        self._signing_key = _key()
        self.signing_cert = workdir / "token-signer.crt"
        pem = _cert(ISSUER, self._signing_key, ISSUER, self._signing_key)
        self.signing_cert.write_bytes(pem)
        self._x5c = base64.b64encode(
            x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)).decode()
        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(server_cert), str(server_key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def realm(self):
        # By name: crane refuses realms given as loopback or private IP literals (server-side request forgery).
        return "https://localhost:%d/token" % self.port

    def token(self, scopes):
        now = int(time.time())
        access = []
        for scope in scopes:
            kind, _colon, rest = scope.partition(":")
            name, _colon, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        header = {"alg": "RS256", "typ": "JWT", "x5c": [self._x5c]}
        claims = {"iss": ISSUER, "sub": self.user, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": secrets.token_hex(8), "access": access}
        signing_input = "%s.%s" % (_b64url(json.dumps(header).encode()), _b64url(json.dumps(claims).encode()))
        signature = self._signing_key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        self.issued += 1
        return "%s.%s" % (signing_input, _b64url(signature))

    def _handler(self):
        service = self
        expected = "Basic " + base64.b64encode(("%s:%s" % (self.user, self.password)).encode()).decode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the http.server API)
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                if url.path != "/token" or self.headers.get("Authorization") != expected:
                    self._answer(401, {"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]})
                    return
                scopes = [scope for value in query.get("scope", []) for scope in value.split(" ")]
                self._answer(200, {"token": service.token(scopes)})

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet: the tests read results, not access logs
                pass

        return Handler


class LocalRegistry:
    """One registry process serving workdir/storage; user (a random password) may pull and push.

    auth: 'htpasswd' (the registry asks for Basic credentials) or 'token' (it asks for a bearer token from
    token_service, which wants the Basic credentials).
    """

    def __init__(self, workdir, user="puller", auth="htpasswd"):
        if auth not in AUTH_MODES:
            raise ValueError("auth %r is not one of %s" % (auth, ", ".join(AUTH_MODES)))
        self.workdir = Path(workdir)
        self.user = user
        self.auth = auth
        self.password = secrets.token_hex(12)
        self.port = None
        self.process = None
        self.bin_dir = None
        self.token_service = None

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
        (self.workdir / "ca.crt").write_bytes(_cert(CA_NAME, ca_key, CA_NAME, ca_key, ca=True))
        (self.workdir / "server.crt").write_bytes(_cert("registry", server_key, CA_NAME, ca_key))
        (self.workdir / "server.key").write_bytes(_pem_key(server_key))
        self.port = free_port()
        config = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "storage")}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16),
                     "tls": {"certificate": str(self.workdir / "server.crt"),
                             "key": str(self.workdir / "server.key")}},
            "auth": self._auth_config(),
        }
        (self.workdir / "config.yml").write_text(yaml.safe_dump(config))
        with open(self.workdir / "registry.log", "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "registry"), "serve", str(self.workdir / "config.yml")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready(timeout)
        self._crane("auth", "login", self.host, "-u", self.user, "--password-stdin", stdin=self.password)
        return self

    def _auth_config(self):
        if self.auth == "htpasswd":
            hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()
            (self.workdir / "htpasswd").write_text("%s:%s\n" % (self.user, hashed))
            return {"htpasswd": {"realm": "accelerators-gpu-test", "path": str(self.workdir / "htpasswd")}}
        self.token_service = TokenService(self.workdir, self.user, self.password,
                                          self.workdir / "server.crt", self.workdir / "server.key")
        self.token_service.thread.start()
        return {"token": {"realm": self.token_service.realm, "service": SERVICE, "issuer": ISSUER,
                          "rootcertbundle": str(self.token_service.signing_cert)}}

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
        if self.token_service:
            self.token_service.server.shutdown()
            self.token_service.server.server_close()

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
