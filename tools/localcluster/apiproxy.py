"""A proxy on 127.0.0.1 in front of a cluster's API server: it counts the requests that pass, and answers with the
faults a test asks for.

Whatever a client is (a module of this collection, kubernetes.core.k8s_info run by ansible-playbook), pointed at the
proxy's kubeconfig its requests are counted the same way: by verb, and the bytes of each answer's body as the API
server sent it (compressed when the client asked for gzip and the server compressed it). The proxy buffers each
answer, so it is for counting and faults, not for timing, and not for watches.

Two ways to reach it:
- plain HTTP, the proxy adding the API server's bearer token itself (the benchmark's counting, bench/);
- HTTPS (tls=the cluster's pki directory): a serving certificate from the cluster's own CA, and a kubeconfig that
  trusts that CA and carries the cluster user's token, which the proxy passes on: a client sees an API server at
  another address, as behind a load balancer. Only a proxy that ends TLS can answer 429 or 503 itself.

Faults (inject()): an answer with a status (429 with Retry-After, 500, 503...), a connection reset (before the
request reaches the API server, or after, the answer lost), a slow answer; for the next N matching requests or for a
number of seconds, optionally only for a method and a path pattern. injected counts what was injected, by kind.
"""

import base64
import collections
import http.server
import json
import re
import socket
import ssl
import struct
import tempfile
import threading
import time
from pathlib import Path

import urllib3
import yaml

from . import controlplane

# Request headers passed on to the API server; the rest (Host, Connection...) are the proxy's business.
FORWARDED_REQUEST_HEADERS = ("Accept", "Accept-Encoding", "Content-Type", "User-Agent", "Authorization")
FORWARDED_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "Audit-Id", "Warning", "Retry-After")
STATUS, RESET, RESET_AFTER, SLOW = "status", "reset", "reset after", "slow"
# What the API server answers, by status, when it rejects or cannot serve a request (its Status reason and message).
_STATUS_TEXT = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected by the test's fault proxy"),
    502: ("BadGateway", "Bad gateway: injected by the test's fault proxy"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "The server was unable to return a response in the time allotted"),
}


class Fault:
    """One fault to inject: kind STATUS (status, retry_after), RESET (the connection reset before the request reaches
    the API server), RESET_AFTER (after: the API server acted, the answer is lost) or SLOW (delay seconds, then the
    answer); for count matching requests (None: any number) and/or until seconds have passed (None: no end);
    matching: method (None: any) and path, a regular expression searched in the request's path and query (None:
    any)."""

    def __init__(self, kind, status=503, retry_after=None, delay=0.0, count=None, seconds=None, method=None,
                 path=None):
        if kind not in (STATUS, RESET, RESET_AFTER, SLOW):
            raise ValueError("unknown fault kind %r" % kind)
        if kind == STATUS and status not in _STATUS_TEXT:
            raise ValueError("no Status text for HTTP %s" % status)
        self.kind, self.status, self.retry_after, self.delay = kind, status, retry_after, delay
        self.count, self.method = count, method
        self.path = re.compile(path) if path else None
        self.until = time.monotonic() + seconds if seconds is not None else None
        self.injected = 0

    @property
    def label(self):
        """The kind of fault in the proxy's counts: the status ('429', '503'), 'reset', 'reset after' or 'slow'."""
        return str(self.status) if self.kind == STATUS else self.kind

    def active(self):
        return (self.count is None or self.injected < self.count) and (
            self.until is None or time.monotonic() < self.until)

    def matches(self, method, path):
        return ((self.method is None or self.method == method) and (self.path is None or self.path.search(path))
                and self.active())


class APIProxy:
    """The proxy, serving from construction until close(); kubeconfig: the path of a kubeconfig that points at it."""

    def __init__(self, kubeconfig, tls=None):
        config = yaml.safe_load(open(kubeconfig))
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.server = cluster["server"]
        self.token = user.get("token")
        self._dir = tempfile.TemporaryDirectory(prefix="accelerators-gpu-apiproxy-")
        ca_file = Path(self._dir.name) / "upstream-ca.crt"
        ca_file.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        self.pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=str(ca_file), maxsize=8,
                                        retries=False, timeout=urllib3.Timeout(connect=5, read=120))
        self.lock = threading.Lock()
        self.requests, self.body_bytes = collections.Counter(), 0
        self.faults, self.injected = [], collections.Counter()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        address = "127.0.0.1:%d" % self.httpd.server_address[1]
        self.kubeconfig = str(Path(self._dir.name) / "proxy.kubeconfig")
        if tls:
            cert, key = self._issue(Path(tls))
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(cert), str(key))
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.url = "https://" + address
            Path(self.kubeconfig).write_text(yaml.safe_dump(controlplane.kubeconfig(
                self.url, Path(tls) / "ca.crt", self.token, user=config["users"][0]["name"])))
        else:
            self.url = "http://" + address
            Path(self.kubeconfig).write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "proxy",
                "clusters": [{"name": "proxy", "cluster": {"server": self.url}}],
                "users": [{"name": "proxy", "user": {}}],
                "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}]}))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def _issue(self, pki):
        """A serving certificate from the cluster's CA (pki/ca.key), kept in the proxy's own directory."""
        own = Path(self._dir.name)
        for name in ("ca.crt", "ca.key"):
            (own / name).write_bytes((pki / name).read_bytes())
        return controlplane.issue_server_cert(own, "apiproxy", "accelerators-gpu-apiproxy")

    # -- counting ------------------------------------------------------------------------------
    def reset(self):
        with self.lock:
            self.requests, self.body_bytes = collections.Counter(), 0

    def counts(self):
        """({verb: requests}, bytes of the answers' bodies as sent) since the last reset()."""
        with self.lock:
            return dict(self.requests), self.body_bytes

    # -- faults --------------------------------------------------------------------------------
    def inject(self, kind, **options):
        """Add a Fault (its options); the first active fault that matches a request is the one it meets."""
        fault = Fault(kind, **options)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self):
        """No more faults; the counts of those injected stay."""
        with self.lock:
            self.faults = []

    def _fault_for(self, method, path):
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.injected += 1
                    self.injected[fault.label] += 1
                    return fault
        return None

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self._dir.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # -- serving -------------------------------------------------------------------------------
    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _reset(self):
                """Close the connection with a TCP reset (SO_LINGER 0): the client reads ECONNRESET."""
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def _answer(self, status, headers, data):
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _status(self, fault):
                reason, message = _STATUS_TEXT[fault.status]
                status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": message, "reason": reason, "code": fault.status}
                headers = [("Content-Type", "application/json")]
                if fault.retry_after is not None:
                    status["details"] = {"retryAfterSeconds": fault.retry_after}
                    headers.append(("Retry-After", str(fault.retry_after)))
                self._answer(fault.status, headers, json.dumps(status).encode())

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                fault = proxy._fault_for(self.command, self.path)
                if fault and fault.kind == RESET:
                    return self._reset()
                if fault and fault.kind == STATUS:
                    return self._status(fault)
                if fault and fault.kind == SLOW:
                    time.sleep(fault.delay)
                headers = dict((name, self.headers[name]) for name in FORWARDED_REQUEST_HEADERS if self.headers[name])
                if "Authorization" not in headers and proxy.token:
                    headers["Authorization"] = "Bearer " + proxy.token
                try:
                    answer = proxy.pool.request(self.command, proxy.server + self.path, body=body, headers=headers,
                                                preload_content=False, decode_content=False, redirect=False)
                    data = answer.read(decode_content=False)
                except urllib3.exceptions.HTTPError:
                    # The API server out of reach: what a load balancer without a backend answers.
                    return self._status(Fault(STATUS, 503))
                with proxy.lock:
                    proxy.requests[self.command] += 1
                    proxy.body_bytes += len(data)
                if fault and fault.kind == RESET_AFTER:
                    return self._reset()
                self._answer(answer.status, [(name, answer.headers[name]) for name in FORWARDED_RESPONSE_HEADERS
                                             if answer.headers.get(name)], data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, *args):
                """Quiet: the callers print the counts."""

        return Handler
