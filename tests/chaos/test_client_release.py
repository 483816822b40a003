"""A chaos run's clients are let go within a bound: a librdkafka destroy that never ends (seen once in a 100-run
campaign, after five bounces of one broker) must not hold the run, and the run names the client left behind."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, Producer

from cluster.chaos.workload import release
from zk.server import free_port


def _nowhere() -> str:
    return f"127.0.0.1:{free_port()}"   # a port nothing listens on: the clients only ever fail to connect


def test_a_consumer_and_a_producer_are_closed_and_reported_done():
    consumer = Consumer({"bootstrap.servers": _nowhere(), "group.id": "release-test", "log_level": 0})
    producer = Producer({"bootstrap.servers": _nowhere(), "log_level": 0})
    assert release("consumer", consumer, timeout_s=20)
    assert release("producer", producer, timeout_s=20)


def test_a_close_that_never_ends_is_left_behind_after_the_timeout():
    gate = threading.Event()

    class Stuck(Consumer):
        def close(self) -> None:
            gate.wait(60)   # released below, so the test leaves no thread behind
            super().close()

    stuck = Stuck({"bootstrap.servers": _nowhere(), "group.id": "release-test", "log_level": 0})
    started = time.monotonic()
    try:
        assert not release("stuck", stuck, timeout_s=0.5)
        assert time.monotonic() - started < 10
    finally:
        gate.set()
