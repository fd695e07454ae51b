"""Serve the stand-in Director over HTTPS on loopback in a background thread."""

from __future__ import annotations

import pathlib
import ssl
import threading

from werkzeug import serving

from standins.director import app as app_mod
from standins.director import store as store_mod
from tether import certs


class DirectorServer:
    """``DirectorServer(store, cert_file, key_file).start()``; ``.url`` is the base URL.

    ``stop()`` closes the socket (the Director is down: connections are refused);
    ``start()`` again serves on the same port."""

    def __init__(self, store: store_mod.Store, cert_file: str | pathlib.Path,
                 key_file: str | pathlib.Path, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = store
        self.host = host
        self.port = port
        self._cert, self._key = str(cert_file), str(key_file)
        self._server: serving.BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    def start(self) -> DirectorServer:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self._cert, self._key)
        self._server = serving.make_server(
            self.host, self.port, app_mod.create_app(self.store), threaded=True, ssl_context=ctx,
        )
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="director",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def self_signed(dest: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A CA and a serving certificate for 127.0.0.1/localhost: (ca, cert, key) files."""
    dest.mkdir(parents=True, exist_ok=True)
    ca = certs.CertificateAuthority.create("director-standin-ca")
    pair = ca.issue("director", dns_names=["localhost"], ip_addresses=["127.0.0.1"], server=True)
    ca_file, cert_file, key_file = dest / "ca.crt", dest / "tls.crt", dest / "tls.key"
    ca_file.write_bytes(ca.cert_pem)
    pair.write(cert_file, key_file)
    return ca_file, cert_file, key_file
