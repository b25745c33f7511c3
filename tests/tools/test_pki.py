"""The local control plane's certificates pass strict X.509 verification, as a real cluster's do: Python 3.13's
default TLS context (VERIFY_X509_STRICT) refuses a certificate without authority key identifier or key usage."""

import socket
import ssl
import threading

from localcluster import controlplane

NAMES = ("127.0.0.1", "localhost")


def test_a_client_with_strict_verification_accepts_the_api_servers_certificate(tmp_path):
    controlplane.write_pki(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "apiserver.crt", tmp_path / "apiserver.key")
    client_context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client_context.verify_flags |= ssl.VERIFY_X509_STRICT
    received = []
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve():
            for _name in NAMES:
                conn, _address = listener.accept()
                try:
                    with server_context.wrap_socket(conn, server_side=True) as tls:
                        received.append(tls.recv(5))
                except (ssl.SSLError, OSError) as error:
                    received.append(error)
        server = threading.Thread(target=serve)
        server.start()
        try:
            for name in NAMES:
                with socket.create_connection(listener.getsockname()) as raw:
                    with client_context.wrap_socket(raw, server_hostname=name) as tls:
                        tls.sendall(b"hello")
        finally:
            server.join(timeout=30)
    assert received == [b"hello", b"hello"]
