"""Starts and stops a real Kubernetes control plane on 127.0.0.1 with kwok playing the nodes.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the simulator run as
detached processes; their pids, ports and credentials live in a state directory so that another
process (the CLI's `down`, a later pytest session) can find and stop them.
"""

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from . import api, stages

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools"
DEFAULT_STATE = Path(os.environ.get("ACCEL_GPU_STATE", REPO / ".cluster"))
FLAVOURS = ("openshift", "kubernetes")
# Marks a cluster as one of ours, so tests never create fake nodes on a real cluster by accident.
MARKER = ("kube-system", "accelerators-gpu-localcluster")


class ClusterError(RuntimeError):
    pass


# Ports for servers are taken below the kernel's ephemeral range (32768 and up on Linux): a port the kernel hands
# out for bind(0) is released before the server binds it, and an outgoing connection (a client of another cluster,
# a second pytest worker's) may take it meanwhile. Below the range, only another server can, and a random pick makes
# two clusters starting at once unlikely to choose the same.
SERVER_PORTS = range(20000, 32768)


def free_port(taken=()):
    """A port on 127.0.0.1 free at the time of asking, below the ephemeral range, and not one of taken (ports chosen
    for servers not started yet: nothing holds them, so the bind below would not see them)."""
    for port in random.sample(SERVER_PORTS, min(200, len(SERVER_PORTS))):
        if port in taken:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port on 127.0.0.1 in %d-%d" % (SERVER_PORTS[0], SERVER_PORTS[-1]))


def _key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _cert(subject_cn, key, issuer_cn, issuer_key, ca=False):
    """A certificate as a real cluster's PKI issues it: with subject and authority key identifiers and key usages,
    which strict X.509 verification (Python 3.13's default, VERIFY_X509_STRICT) requires."""
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_cn)]))
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=not ca, key_cert_sign=ca,
                                            crl_sign=ca, content_commitment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False, decipher_only=False),
                              critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                              critical=False))
    if not ca:
        builder = (builder
                   .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.SubjectAlternativeName([
                       x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False))
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


CA_NAME = "accelerators-gpu-local-ca"


def write_pki(pki):
    """A CA, the apiserver's serving certificate and the service-account signing key pair."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    (pki / "ca.crt").write_bytes(_cert(CA_NAME, ca_key, CA_NAME, ca_key, ca=True))
    (pki / "ca.key").write_bytes(_pem_key(ca_key))
    issue_server_cert(pki, "apiserver", "kube-apiserver")
    sa_key = _key()
    (pki / "sa.key").write_bytes(_pem_key(sa_key))
    (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def issue_server_cert(pki, name, common_name):
    """A serving certificate for 127.0.0.1 and localhost from the cluster's CA (pki/ca.key): pki/<name>.crt and
    pki/<name>.key, which a client that trusts the cluster's CA accepts. Returns their paths."""
    ca_key = serialization.load_pem_private_key((Path(pki) / "ca.key").read_bytes(), password=None)
    key = _key()
    cert, key_file = Path(pki) / ("%s.crt" % name), Path(pki) / ("%s.key" % name)
    cert.write_bytes(_cert(common_name, key, CA_NAME, ca_key))
    key_file.write_bytes(_pem_key(key))
    return cert, key_file


def kubeconfig(server, ca_file, token, user="admin"):
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {
            "server": server,
            "certificate-authority-data": base64.b64encode(Path(ca_file).read_bytes()).decode()}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
    }


# The API server's audit log records only pod deletions and evictions, at Metadata level (who, what, the answer).
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": [
    {"level": "Metadata", "verbs": ["delete", "deletecollection"], "resources": [{"group": "", "resources": ["pods"]}]},
    {"level": "Metadata", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods/eviction"]}]},
    {"level": "None"}]}
# Every request at Metadata level (who, what, the answer), for tests of whose credentials reached which cluster.
AUDIT_EVERY_REQUEST = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                       "rules": [{"level": "Metadata"}]}
AUDIT_POLICIES = {"pods": AUDIT_POLICY, "requests": AUDIT_EVERY_REQUEST}


class ControlPlane:
    """One local cluster, described by the files in its state directory."""

    def __init__(self, state_dir=DEFAULT_STATE):
        self.state = Path(state_dir)
        self.kubeconfig = self.state / "kubeconfig"
        # The automation's own user (cluster-admin, its own token and name), as a site gives Ansible an account of
        # its own: the control plane's components and the tests' reads are user admin.
        self.automation_kubeconfig = self.state / "automation.kubeconfig"
        self.info_file = self.state / "cluster.json"

    # -- state ---------------------------------------------------------------------------------
    def info(self):
        if not self.info_file.exists():
            return None
        return json.loads(self.info_file.read_text())

    def _save(self, info):
        self.info_file.write_text(json.dumps(info, indent=2))

    def running(self):
        info = self.info()
        return bool(info) and all(_alive(pid) for pid in info["pids"].values())

    # -- start ---------------------------------------------------------------------------------
    def up(self, flavour="openshift", bin_dir=None, heartbeat_seconds=30, simulator=True, audit="pods"):
        """Starts the control plane; without simulator, no one plays the GPU stack's pods (a benchmark that writes
        their status itself). audit: what the API server's audit log records, the deletions and evictions of pods
        ("pods"), or every request ("requests")."""
        if flavour not in FLAVOURS:
            raise ClusterError("unknown flavour %r: choose one of %s" % (flavour, ", ".join(FLAVOURS)))
        if self.running():
            raise ClusterError("a cluster is already running from %s: stop it first (down)" % self.state)
        self.down(quiet=True)
        started = time.monotonic()
        bin_dir = Path(bin_dir or build_binaries())
        shutil.rmtree(self.state, ignore_errors=True)
        (self.state / "logs").mkdir(parents=True)
        pki = self.state / "pki"
        write_pki(pki)
        token, automation_token = secrets.token_hex(16), secrets.token_hex(16)
        # prometheus: the simulator's query API of the DCGM exporters' fields (gpu_faults.prometheus_url reads it).
        ports = {}
        for name in ("etcd", "etcd_peer", "apiserver", "prometheus"):
            ports[name] = free_port(taken=ports.values())
        automation_user = "automation-%d" % ports["apiserver"]
        (pki / "tokens.csv").write_text('%s,admin,admin-uid,"system:masters"\n%s,%s,%s-uid,"system:masters"\n' % (
            token, automation_token, automation_user, automation_user))
        server = "https://127.0.0.1:%d" % ports["apiserver"]
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig(server, pki / "ca.crt", token)))
        self.automation_kubeconfig.write_text(yaml.safe_dump(kubeconfig(server, pki / "ca.crt", automation_token,
                                                                        user=automation_user)))
        info = {"flavour": flavour, "server": server, "ports": ports, "pids": {},
                "kubeconfig": str(self.kubeconfig), "bin_dir": str(bin_dir),
                "automation": {"user": automation_user, "kubeconfig": str(self.automation_kubeconfig)}}
        self._save(info)

        # etcd's data is disposable: keep it in memory where possible, fsyncs dominate start-up otherwise.
        shm = Path("/dev/shm")
        etcd_data = Path(shm if shm.is_dir() else self.state) / ("accelerators-gpu-etcd-%d" % ports["etcd"])
        info["etcd_data"] = str(etcd_data)
        # Tests read how pods went: deleted, or evicted through the Eviction API (PodDisruptionBudgets held).
        audit_policy = self.state / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(AUDIT_POLICIES[audit]))
        info["audit_log"] = str(self.state / "logs" / "audit.log")
        etcd_url = "http://127.0.0.1:%d" % ports["etcd"]
        peer_url = "http://127.0.0.1:%d" % ports["etcd_peer"]
        self._spawn(info, "etcd", [
            str(bin_dir / "etcd"), "--name=local", "--data-dir=%s" % etcd_data,
            "--listen-client-urls=" + etcd_url, "--advertise-client-urls=" + etcd_url,
            "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
            "--initial-cluster=local=" + peer_url, "--listen-metrics-urls=",
            "--log-level=warn", "--logger=zap"])
        self._spawn(info, "kube-apiserver", [
            str(bin_dir / "kube-apiserver"), "--etcd-servers=" + etcd_url,
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            "--secure-port=%d" % ports["apiserver"],
            "--tls-cert-file=%s" % (pki / "apiserver.crt"), "--tls-private-key-file=%s" % (pki / "apiserver.key"),
            "--client-ca-file=%s" % (pki / "ca.crt"), "--token-auth-file=%s" % (pki / "tokens.csv"),
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-account-key-file=%s" % (pki / "sa.pub"),
            "--service-account-signing-key-file=%s" % (pki / "sa.key"),
            "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=RBAC",
            "--allow-privileged=true", "--endpoint-reconciler-type=none", "--profiling=false",
            "--audit-policy-file=%s" % audit_policy, "--audit-log-path=%s" % info["audit_log"],
            "--audit-log-format=json", "--audit-log-maxsize=50", "--audit-log-maxbackup=1",
            "--v=1"])
        self._wait_ready(info, server, pki / "ca.crt", token)
        (pki / "components.kubeconfig").write_text(yaml.safe_dump(kubeconfig(server, pki / "ca.crt", token)))
        components = pki / "components.kubeconfig"
        self._spawn(info, "kube-controller-manager", [
            str(bin_dir / "kube-controller-manager"), "--kubeconfig=%s" % components,
            "--authentication-kubeconfig=%s" % components, "--authorization-kubeconfig=%s" % components,
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
            "--service-account-private-key-file=%s" % (pki / "sa.key"), "--root-ca-file=%s" % (pki / "ca.crt"),
            # A simulated node turns NotReady only when the simulation says so (a reboot, a lost node), never for a
            # late heartbeat: kwok restarts a node's heartbeat delay whenever the node changes, so a node written
            # often can go minutes without one, and the node lifecycle controller would then mark its pods NotReady.
            "--node-monitor-grace-period=%ds" % max(3600, heartbeat_seconds * 4),
            "--profiling=false", "--v=1"])
        self._spawn(info, "kube-scheduler", [
            str(bin_dir / "kube-scheduler"), "--kubeconfig=%s" % components,
            "--authentication-kubeconfig=%s" % components, "--authorization-kubeconfig=%s" % components,
            "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false", "--profiling=false", "--v=1"])
        stage_file = self.state / "kwok-stages.yaml"
        stage_file.write_text(yaml.safe_dump_all(stages.stage_documents(heartbeat_seconds)))
        self._spawn(info, "kwok", [
            str(bin_dir / "kwok"), "--kubeconfig=%s" % components, "--config=%s" % stage_file,
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1", "--cidr=127.128.0.0/16", "--server-address=",
            "--enable-crds="])
        client = api.client_from_kubeconfig(self.kubeconfig)
        api.install_crds(client, flavour)
        api.mark_local(client, MARKER, flavour)
        if simulator:
            # Its temporary files (the Kubernetes client's copy of the cluster's CA) in the state directory: it is
            # stopped by a signal, so its exit handlers, which delete them, do not run.
            (self.state / "tmp").mkdir(exist_ok=True)
            self._spawn(info, "simulator", [
                sys.executable, "-m", "localcluster.simulator", "--kubeconfig=%s" % components,
                "--prometheus-port=%d" % ports["prometheus"]],
                env={"PYTHONPATH": str(TOOLS), "TMPDIR": str(self.state / "tmp")})
            self._wait_listening(info, "simulator", ports["prometheus"])
        api.wait_default_service_account(client, timeout=60)
        info["startup_seconds"] = round(time.monotonic() - started, 1)
        self._save(info)
        return info

    def _spawn(self, info, name, argv, env=None):
        log = open(self.state / "logs" / ("%s.log" % name), "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=dict(os.environ, **(env or {})))
        info["pids"][name] = proc.pid
        # How it was started, so that restart() starts it again the same way (ports, certificates, data).
        info.setdefault("commands", {})[name] = {"argv": argv, "env": env or {}}
        self._save(info)
        time.sleep(0.2)
        if proc.poll() is not None:
            raise ClusterError("%s exited at once (code %s): see %s" % (
                name, proc.returncode, self.state / "logs" / ("%s.log" % name)))

    def _wait_listening(self, info, name, port, timeout=60):
        """Until process name accepts connections on port: one that dies first (its port taken by another server,
        say) fails the start naming its log, instead of leaving a cluster without it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(info["pids"][name]):
                raise ClusterError("%s died during start-up: see %s" % (name, self.state / "logs" / ("%s.log" % name)))
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise ClusterError("%s does not listen on 127.0.0.1:%d after %d s: see %s" % (
            name, port, timeout, self.state / "logs" / ("%s.log" % name)))

    def _wait_ready(self, info, server, ca_file, token, timeout=60):
        context = ssl.create_default_context(cafile=str(ca_file))
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for name, pid in info["pids"].items():
                if not _alive(pid):
                    raise ClusterError("%s died during start-up: see %s" % (
                        name, self.state / "logs" / ("%s.log" % name)))
            request = urllib.request.Request(server + "/readyz", headers={"Authorization": "Bearer " + token})
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as response:
                    if response.status == 200:
                        return
            except Exception as error:  # connection refused while it starts; keep the last reason
                last = error
            time.sleep(0.3)
        raise ClusterError("kube-apiserver not ready after %ds (%s): see %s" % (
            timeout, last, self.state / "logs" / "kube-apiserver.log"))

    # -- restart -------------------------------------------------------------------------------
    RESTARTABLE = ("etcd", "kube-apiserver")

    def stop(self, name, timeout=10):
        """Stop one component of a running cluster (etcd or kube-apiserver), as a control-plane upgrade does: SIGTERM
        (the API server stops listening at once and drains its requests), SIGKILL after timeout seconds (it would
        wait up to a minute for its long-running requests). Returns its pid."""
        info = self._restartable(name)
        pid = info["pids"][name]
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        _signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
            _signal_group(pid, 0)  # reaps it, when it is this process's child
        if _alive(pid):
            raise ClusterError("%s (pid %d) still running after SIGKILL" % (name, pid))
        return pid

    def start(self, name):
        """Start a component stopped by stop() again with the command it first had: the same ports, certificates,
        tokens and (etcd) data. Returns once the API server is ready again; every other component (kcm, scheduler,
        kwok, the simulator) reconnects on its own, as on a real cluster."""
        info = self._restartable(name)
        if _alive(info["pids"][name]):
            raise ClusterError("%s is running (pid %d): stop it first" % (name, info["pids"][name]))
        command = info["commands"][name]
        self._spawn(info, name, command["argv"], command["env"])
        self.wait_ready()

    def restart(self, name, down_seconds=0.0):
        """stop(), down_seconds without it, start(): the API server (or etcd) of a running cluster restarted."""
        self.stop(name)
        time.sleep(down_seconds)
        self.start(name)

    def restart_apiserver(self, down_seconds=0.0):
        self.restart("kube-apiserver", down_seconds)

    def restart_etcd(self, down_seconds=0.0):
        self.restart("etcd", down_seconds)

    @contextlib.contextmanager
    def frozen(self, name):
        """Within the block, one component of the running cluster (kwok, the simulator...) runs no instruction, as a
        process the CPU does not come to on a loaded machine; after it, it goes on with its timers overdue and the
        events of the while still to read."""
        pid = self.info()["pids"][name]
        _signal_group(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            _signal_group(pid, signal.SIGCONT)

    def heal(self):
        """Start again every restartable component found stopped (a test that failed mid-restart); returns their
        names."""
        info = self.info() or {}
        stopped = [name for name in self.RESTARTABLE
                   if name in info.get("commands", {}) and not _alive(info["pids"][name])]
        for name in stopped:
            self.start(name)
        return stopped

    def wait_ready(self, timeout=120):
        """Until the API server answers /readyz with 200 (its storage reachable again after etcd restarted)."""
        info = self.info()
        self._wait_ready(info, info["server"], self.state / "pki" / "ca.crt", self._admin_token(), timeout)

    def _admin_token(self):
        return yaml.safe_load(self.kubeconfig.read_text())["users"][0]["user"]["token"]

    def _restartable(self, name):
        info = self.info()
        if not info:
            raise ClusterError("no cluster state in %s" % self.state)
        if name not in self.RESTARTABLE or name not in info.get("commands", {}):
            raise ClusterError("cannot restart %r: choose one of %s" % (name, ", ".join(self.RESTARTABLE)))
        return info

    # -- stop ----------------------------------------------------------------------------------
    def down(self, quiet=False):
        info = self.info()
        if not info:
            if not quiet:
                print("no cluster state in %s" % self.state)
            return []
        # Stop in reverse order: clients first, etcd last.
        order = list(info["pids"].items())[::-1]
        for _name, pid in order:
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(pid) for _n, pid in order):
            time.sleep(0.2)
        for _name, pid in order:
            _signal_group(pid, signal.SIGKILL)
        time.sleep(0.2)
        left = [name for name, pid in order if _alive(pid)]
        if info.get("etcd_data"):
            shutil.rmtree(info["etcd_data"], ignore_errors=True)
        self.info_file.unlink()
        if left:
            raise ClusterError("still running after SIGKILL: %s" % ", ".join(left))
        return [name for name, _pid in order]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of this process counts as gone.
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def build_binaries():
    """The directory of cached control-plane binaries, built on first use."""
    result = subprocess.run(["bash", str(TOOLS / "localcluster" / "build-binaries.sh")],
                            stdout=subprocess.PIPE, check=True, text=True)
    return result.stdout.strip().splitlines()[-1]
