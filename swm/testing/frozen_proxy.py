"""A loopback TCP proxy that freezes: it stops forwarding and keeps every socket open.

A network partition or a frozen host does not close a connection: the client's data is sent, or
acknowledged by a kernel whose process no longer runs, and no answer ever comes. Nothing on the
client side sees an error, so every wait without a bound waits for ever. This proxy plays that
fault on loopback, for the tests and ``bench/faults.py``::

    with FreezingProxy(("127.0.0.1", 5432), freeze_after=10) as proxy:
        url = proxy.url("postgresql://postgres@127.0.0.1:5432/test")   # the same URL, through the proxy
        ...                                       # the 10th chunk the client sends and all after it are held
        proxy.frozen.wait()                       # an event: set when it froze

``freeze_after=N`` freezes when the client side has sent N chunks (roughly N statements; None:
only on `freeze`). Frozen, what either side sends is dropped, connections accepted later are
held open and never reach the server, and nothing is closed until the proxy is. `cut` is the
other fault: every connection is closed and later ones are closed as they arrive (a server that
went away).
"""

from __future__ import annotations

import re
import socket
import threading
from types import TracebackType


class FreezingProxy:
    """Forward loopback TCP connections to ``upstream`` until frozen; then hold them open and forward nothing."""

    def __init__(self, upstream: tuple[str, int], freeze_after: int | None = None) -> None:
        self.upstream, self.freeze_after = upstream, freeze_after
        self.frozen = threading.Event()
        self.sent = 0  # chunks forwarded from clients to the server
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._cut = False
        self._acceptor = threading.Thread(target=self._accept, name="frozen-proxy", daemon=True)

    def url(self, url: str) -> str:
        """Return the PostgreSQL ``url`` with its host and port replaced by the proxy's."""
        return re.sub(r"@[^/@?]+(/|\?|$)", f"@127.0.0.1:{self.port}\\1", url, count=1)

    def freeze(self) -> None:
        """Stop forwarding now (sockets stay open)."""
        self.frozen.set()

    def cut(self) -> None:
        """Close every connection now, and each one accepted later at once."""
        self._cut = True
        self.frozen.set()
        self._shut_all()

    def _shut_all(self, close: bool = False) -> None:
        """Shut down (and with ``close`` close) every connection's sockets, both sides."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if close:
                sock.close()

    def __enter__(self) -> FreezingProxy:
        self._acceptor.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the listener and every connection (both sides)."""
        self._closed.set()
        self._listener.close()
        self._shut_all(close=True)

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            if self._cut:
                client.close()
                continue
            self._keep(client)
            if self.frozen.is_set():
                threading.Thread(target=self._pump, args=(client, None, False), daemon=True).start()
                continue  # held open; it never reaches the server
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self._keep(server)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket | None, from_client: bool) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if from_client and not self.frozen.is_set():
                with self._lock:
                    self.sent += 1
                    if self.freeze_after is not None and self.sent >= self.freeze_after:
                        self.frozen.set()
            if self.frozen.is_set() or target is None:
                continue  # dropped: read, so the sender's kernel sees it acknowledged, and never answered
            try:
                target.sendall(data)
            except OSError:
                return
