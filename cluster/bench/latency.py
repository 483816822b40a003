"""Produce latency at a fixed rate: send -> delivery callback for every message, and librdkafka's own
produce() -> acknowledgement times beside it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Producer

from cluster.bench.client_kit import ClientBench, Deadline, Deliveries, Stopwatch
from cluster.bench.measure import percentile


@dataclass
class LatencySample:
    """Send -> delivery callback times of one paced run, and librdkafka's own produce() -> ack times."""

    latencies_ms: list[float]
    client_latencies_ms: list[float]
    achieved_rate: float
    watch: Stopwatch

    def librdkafka_percentiles(self) -> dict:
        return {f"p{q}": round(percentile(self.client_latencies_ms, q), 3) for q in (50, 99)} \
            if self.client_latencies_ms else {}


def measure_latency(bench: ClientBench, topic: str, producer_config: dict, name: str, count: int, rate: int,
                    deadline: Deadline) -> LatencySample:
    """Warm up every partition, then send ``count`` messages at ``rate`` per second and time each ack."""
    producer = Producer(bench.config(producer_config, name))
    payload = bench.payload
    warm_up = Deliveries()
    for partition in range(bench.settings.partitions):  # connections and metadata up before the clock
        for _ in range(10):
            producer.produce(topic, payload, partition=partition, on_delivery=warm_up)
    while warm_up.reported < 10 * bench.settings.partitions:
        producer.flush(min(0.5, deadline.remaining()))
        deadline.check(lambda: "warm-up messages not acknowledged")
    warm_up.raise_if_failed("warm-up")

    latencies_ms: list[float] = []
    client_latencies_ms: list[float] = []
    deliveries = Deliveries()

    def on_delivery(error, message, sent: float) -> None:
        deliveries(error, message)
        if error is None:
            latencies_ms.append((time.perf_counter() - sent) * 1000)
            measured = message.latency()  # librdkafka's own produce() -> ack, without the callback dispatch
            if measured is not None:
                client_latencies_ms.append(measured * 1000)

    interval = 1 / rate
    progress = lambda: f"{deliveries.reported:,} of {count:,} latency messages acknowledged"  # noqa: E731
    watch = Stopwatch(bench.meter)
    started = last_send = watch.started
    for i in range(count):
        due = started + i * interval
        while (wait := due - time.perf_counter()) > 0:
            if wait < 0.001:  # librdkafka counts in whole milliseconds: poll(0) here would spin a core
                time.sleep(wait)
            else:
                producer.poll(wait)  # serves delivery callbacks as acks arrive, so their times are fresh
        last_send = time.perf_counter()
        producer.produce(topic, payload,
                         on_delivery=lambda error, message, sent=last_send: on_delivery(error, message, sent))
        producer.poll(0)
        deadline.check(progress)
    while deliveries.reported < count:
        producer.poll(min(0.1, deadline.remaining()))
        deadline.check(progress)
    watch.stop()
    deliveries.raise_if_failed("latency")
    achieved = (count - 1) / (last_send - started) if count > 1 else float(rate)
    return LatencySample(latencies_ms, client_latencies_ms, achieved, watch)
