"""The broker's ``/metrics`` endpoint: an HTTP server on a thread of its own (as prometheus_client's
``start_http_server``), answering with this broker's metrics (``collector.py``) followed by the process's own
from prometheus_client's ProcessCollector (CPU seconds, resident memory, open files)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

from broker.metrics.collector import BrokerExposition
from broker.metrics.snapshot import BrokerSnapshot

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POLL_INTERVAL_S = 0.05


class MetricsBindError(RuntimeError):
    """The metrics port cannot be bound; the message says what to do."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never holds up the broker's exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per scrape every few seconds would drown the broker's log


class MetricsServer:
    def __init__(self, host: str, port: int, take_snapshot: Callable[[], BrokerSnapshot]) -> None:
        self.host = host
        self.port = port
        self.exposition = BrokerExposition(take_snapshot)
        self.process_registry = CollectorRegistry()
        ProcessCollector(registry=self.process_registry)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def body(self) -> bytes:
        return self.exposition.text().encode() + generate_latest(self.process_registry)

    def _app(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") not in ("/metrics", "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"kafkasim serves its Prometheus metrics on /metrics\n"]
        try:
            body = self.body()
        except Exception as exc:
            log.warning("metrics scrape failed: %r", exc)
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [f"the broker could not report its metrics: {exc}\n".encode()]
        start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
        return [body]

    def start(self) -> None:
        try:
            self._server = make_server(self.host, self.port, self._app, _Server, handler_class=_QuietHandler)
        except OSError as exc:
            raise MetricsBindError(
                f"kafkasim.metrics.port={self.port} cannot bind {self.host}:{self.port}: {exc.strerror}; stop what "
                "holds the port, choose another kafkasim.metrics.port, or set it to 0 to serve no metrics") from None
        # serve_forever looks at its shutdown flag once per poll: at the default 0.5 s a broker's stop waited for
        # it up to half a second
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S},
                                        name="metrics-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._server = self._thread = None
