"""A counting HTTP proxy on 127.0.0.1 in front of the local API server, for the benchmark's byte and request figures.

Whatever a client is (a module of this collection, kubernetes.core.k8s_info run by ansible-playbook), pointed at the
proxy's kubeconfig its requests are counted the same way: by verb, and the bytes of each answer's body as the API
server sent it (compressed when the client asked for gzip and the server compressed it). The proxy speaks plain HTTP
to the client and adds the API server's bearer token itself; it buffers each answer, so it is for counting, not for
timing.
"""

import base64
import collections
import http.server
import tempfile
import threading

import urllib3
import yaml

# Request headers passed on to the API server; the rest (Host, Connection...) are the proxy's business.
FORWARDED_REQUEST_HEADERS = ("Accept", "Accept-Encoding", "Content-Type", "User-Agent")
FORWARDED_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding", "Audit-Id", "Warning")


class CountingProxy:
    def __init__(self, kubeconfig):
        config = yaml.safe_load(open(kubeconfig))
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        self.server = cluster["server"]
        self.token = user["token"]
        self._ca = tempfile.NamedTemporaryFile("wb", suffix=".crt")
        self._ca.write(base64.b64decode(cluster["certificate-authority-data"]))
        self._ca.flush()
        self.pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=self._ca.name, maxsize=8)
        self.lock = threading.Lock()
        self.requests, self.body_bytes = collections.Counter(), 0
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.kubeconfig = tempfile.NamedTemporaryFile("w", suffix=".kubeconfig")
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "proxy",
                        "clusters": [{"name": "proxy", "cluster": {
                            "server": "http://127.0.0.1:%d" % self.httpd.server_address[1]}}],
                        "users": [{"name": "proxy", "user": {}}],
                        "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}]},
                       self.kubeconfig)
        self.kubeconfig.flush()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def reset(self):
        with self.lock:
            self.requests, self.body_bytes = collections.Counter(), 0

    def counts(self):
        """({verb: requests}, bytes of the answers' bodies as sent) since the last reset()."""
        with self.lock:
            return dict(self.requests), self.body_bytes

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.kubeconfig.close()
        self._ca.close()

    def _handler(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = dict((name, self.headers[name]) for name in FORWARDED_REQUEST_HEADERS if self.headers[name])
                headers["Authorization"] = "Bearer " + proxy.token
                answer = proxy.pool.request(self.command, proxy.server + self.path, body=body, headers=headers,
                                            preload_content=False, decode_content=False, redirect=False)
                data = answer.read(decode_content=False)
                with proxy.lock:
                    proxy.requests[self.command] += 1
                    proxy.body_bytes += len(data)
                self.send_response(answer.status)
                for name in FORWARDED_RESPONSE_HEADERS:
                    if answer.headers.get(name):
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, *args):
                """Quiet: the benchmark prints the counts."""

        return Handler
