"""The broker's ``/metrics`` endpoint: prometheus_client's HTTP server, on a thread of its own, over a
registry holding this broker's collector and the process's own metrics (CPU, memory, open files)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

from broker.metrics.collector import BrokerCollector
from broker.metrics.snapshot import BrokerSnapshot


class MetricsBindError(RuntimeError):
    """The metrics port cannot be bound; the message says what to do."""


class MetricsServer:
    def __init__(self, host: str, port: int, take_snapshot: Callable[[], BrokerSnapshot]) -> None:
        self.host = host
        self.port = port
        self.registry = CollectorRegistry()
        self.registry.register(BrokerCollector(take_snapshot))
        ProcessCollector(registry=self.registry)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def start(self) -> None:
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise MetricsBindError(
                f"kafkasim.metrics.port={self.port} cannot bind {self.host}:{self.port}: {exc.strerror}; stop what "
                "holds the port, choose another kafkasim.metrics.port, or set it to 0 to serve no metrics") from None

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._server = self._thread = None
