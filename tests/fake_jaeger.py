"""A local HTTP server playing Jaeger's query service, for the fetch and fuzz tests."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def fake_jaeger(answer: Callable[[str], tuple[int, bytes]]) -> Iterator[str]:
    """Serve GETs on 127.0.0.1 with ``answer(path) -> (status, body)``; yield the base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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
