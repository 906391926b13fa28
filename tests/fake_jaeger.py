"""Local HTTP servers playing Jaeger's query service, for the fetch and fuzz tests.

    with fake_jaeger(lambda path: (200, b'{"data": []}')) as url: ...
    with endless_jaeger(content_length=10**12) as (url, sent): ...   # a hostile server
    with scripted_jaeger(lambda conn: conn.sendall(b"junk\r\n\r\n")) as (url, requests): ...
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextlib.contextmanager
def fake_jaeger(answer: Callable[[str], tuple[int, bytes]]) -> Iterator[str]:
    """Serve GETs on 127.0.0.1 with ``answer(path) -> (status, body)``; yield the base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        wbufsize = -1  # head and body in one write (apart, a delayed ACK costs 40 ms a GET)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with _serve(Handler) as url:
        yield url


@contextlib.contextmanager
def endless_jaeger(content_length: int | None = None, status: int = 200
                   ) -> Iterator[tuple[str, list[int]]]:
    """Answer every GET with ``status`` and an endless body (spaces, then zeros, until the
    client goes), announcing ``content_length`` when given; yield the URL and a one-item list
    of the bytes sent so far."""
    sent = [0]
    block = b" " * 65536

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if content_length is not None:
                self.send_header("Content-Length", str(content_length))
            self.end_headers()
            try:
                while True:
                    self.wfile.write(block)
                    sent[0] += len(block)
            except OSError:  # the client closed the connection
                pass

        def log_message(self, *args: object) -> None:
            pass

    with _serve(Handler) as url:
        yield url, sent


@contextlib.contextmanager
def scripted_jaeger(script: Callable[[socket.socket], None]
                    ) -> Iterator[tuple[str, list[str]]]:
    """A raw TCP server on 127.0.0.1: each connection's request is read, then
    ``script(conn)`` writes whatever bytes it likes (not necessarily HTTP); yield the URL and
    the request lines received so far."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    requests: list[str] = []
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            head = b""
            try:
                while b"\r\n\r\n" not in head:
                    data = conn.recv(4096)
                    if not data:
                        return
                    head += data
                requests.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
                script(conn)
            except OSError:  # the client went: what the bounds are for
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", requests
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def trickle(conn: socket.socket, data: bytes, every: float, seconds: float) -> None:
    """Send ``data`` one byte at a time, a byte every ``every`` s, for at most ``seconds``."""
    until = time.monotonic() + seconds
    for i in range(len(data)):
        if time.monotonic() > until:
            return
        conn.sendall(data[i : i + 1])
        time.sleep(every)
