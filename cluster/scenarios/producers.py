"""Producers a scenario drives: confluent-kafka (librdkafka), the client a class would use. A batch sent and
waited for (``send``), or one value every few milliseconds in a thread while other steps run
(``BackgroundProducer``): both report which values were acknowledged and which errors came back."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Producer

_QUIET = logging.getLogger("kafkasim.scenarios.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False  # a dead broker makes librdkafka log every reconnect; the scenario tells the story


def acks_setting(acks: int | str) -> str:
    return {"all": "all", "-1": "all", "1": "1", "0": "0"}[str(acks)]


def _config(bootstrap: str, acks: int | str, retries: bool, timeout_s: float) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks_setting(acks),
        "linger.ms": 0,
        # no retries: a refusal (NOT_ENOUGH_REPLICAS) is reported at once instead of retried until the timeout
        "retries": 2147483647 if retries else 0,
        "retry.backoff.ms": 100,
        "message.timeout.ms": int(timeout_s * 1000),
        "request.timeout.ms": min(int(timeout_s * 1000), 30000),
        "topic.metadata.refresh.interval.ms": 1000,
        "socket.connection.setup.timeout.ms": 2000,
        "reconnect.backoff.max.ms": 500,
        "logger": _QUIET,
        "error_cb": lambda _error: None,
    }


@dataclass
class Sent:
    acknowledged: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # error name -> how many values got it
    ack_times: list[float] = field(default_factory=list)  # monotonic seconds
    send_times: dict[str, float] = field(default_factory=dict)
    offsets: list[int] = field(default_factory=list)  # of the acknowledged values, -1 where acks=0 gives none

    def on_delivery(self, error: KafkaError | None, message) -> None:
        value = message.value().decode()
        if error is None:
            self.acknowledged.append(value)
            self.ack_times.append(time.monotonic())
            self.offsets.append(message.offset() if message.offset() is not None and message.offset() >= 0 else -1)
        else:
            self.failed.append(value)
            self.errors[error.name()] = self.errors.get(error.name(), 0) + 1

    def longest_wait_s(self) -> float:
        """The longest time a value waited for its acknowledgement: how long producers saw an outage."""
        waits = [self.ack_times[i] - self.send_times.get(v, self.ack_times[i])
                 for i, v in enumerate(self.acknowledged)]
        return round(max(waits, default=0.0), 2)


def send(bootstrap: str, topic: str, values: list[str], acks: int | str, retries: bool = True,
         timeout_s: float = 20.0) -> Sent:
    producer = Producer(_config(bootstrap, acks, retries, timeout_s))
    sent = Sent()
    for value in values:
        sent.send_times[value] = time.monotonic()
        producer.produce(topic, value.encode(), partition=0, on_delivery=sent.on_delivery)
        producer.poll(0)
    left = producer.flush(timeout_s + 5)
    if left:
        sent.errors["NOT_DELIVERED_IN_TIME"] = left
    return sent


class BackgroundProducer:
    """One value every ``interval_s`` to partition 0 of ``topic`` until stopped, from a thread of its own."""

    def __init__(self, bootstrap: str, topic: str, label: str, acks: int | str, interval_s: float = 0.02,
                 timeout_s: float = 30.0) -> None:
        self.topic, self.label, self.interval_s, self.timeout_s = topic, label, interval_s, timeout_s
        self.producer = Producer(_config(bootstrap, acks, True, timeout_s))
        self.sent = Sent()
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{label}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            value = f"{self.label}-{self.count}"
            self.count += 1
            self.sent.send_times[value] = time.monotonic()
            try:
                self.producer.produce(self.topic, value.encode(), partition=0, on_delivery=self.sent.on_delivery)
            except BufferError:
                self.count -= 1
            self.producer.poll(0)
            # poll(timeout) returns early whenever a delivery report is ready, which with acks=0 is always
            self._stop.wait(self.interval_s)

    def acknowledged_count(self) -> int:
        return len(self.sent.acknowledged)

    def stop(self) -> Sent:
        self._stop.set()
        self._thread.join(10)
        left = self.producer.flush(self.timeout_s + 5)
        if left:
            self.sent.errors["NOT_DELIVERED_IN_TIME"] = left
        return self.sent
