"""The /metrics endpoint without a broker: the HTTP server over a hand-made snapshot, and the hop to an
event loop running in another thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.error
import urllib.request

import pytest

from broker.metrics.http_server import MetricsBindError, MetricsServer
from broker.metrics.snapshot import on_loop
from tests.metrics.support import scrape_url, value
from tests.metrics.test_names_and_collector import hand_made


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server():
    started = MetricsServer("127.0.0.1", free_port(), hand_made)
    started.start()
    yield started
    started.stop()


def test_metrics_are_served_with_the_process_metrics_after_them(server):
    with urllib.request.urlopen(server.url, timeout=5) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = scrape_url(server.url)
    assert value(samples, "kafkasim_server_broker_epoch") == 42
    assert value(samples, "process_resident_memory_bytes") > 0


def test_other_paths_are_not_found(server):
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(server.url.replace("/metrics", "/nothing"), timeout=5)
    assert caught.value.code == 404


def test_a_snapshot_that_fails_answers_503_and_the_server_goes_on():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise TimeoutError("the broker's event loop did not answer")
        return hand_made()

    server = MetricsServer("127.0.0.1", free_port(), flaky)
    server.start()
    try:
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(server.url, timeout=5)
        assert caught.value.code == 503
        assert value(scrape_url(server.url), "kafkasim_controller_epoch") == 7
    finally:
        server.stop()


def test_a_taken_port_is_named_in_the_error():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(MetricsBindError, match=f"kafkasim.metrics.port={port} cannot bind 127.0.0.1:{port}"):
            MetricsServer("127.0.0.1", port, hand_made).start()


def test_the_snapshot_is_taken_on_the_loop_thread():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        taken_on = on_loop(loop, lambda: threading.current_thread())
        assert taken_on is thread
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_loop_that_does_not_answer_times_out_with_a_message():
    loop = asyncio.new_event_loop()  # never run
    try:
        with pytest.raises(TimeoutError, match="did not answer the scrape"):
            on_loop(loop, hand_made, timeout_s=0.1)
    finally:
        loop.close()
