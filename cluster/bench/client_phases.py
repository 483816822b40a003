"""The phases of ``kafkasim bench client``: (a) produce throughput, (b) consume throughput, (c) produce latency."""

from __future__ import annotations

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from cluster.bench.client import CONSUME_TARGET_MIB_S, PRODUCE_TARGET_MIB_S
from cluster.bench.client_kit import THROUGHPUT_PRODUCER, LATENCY_PRODUCER, ClientBench, Deadline, PhaseError, Stopwatch
from cluster.bench.latency import measure_latency
from cluster.bench.measure import MIB, percentile, throughput_mib_s
from cluster.bench.report import Figure, Phase

CONSUMER = {
    "group.id": "kafkasim-bench",        # required by confluent-kafka; only assign() is used, nothing committed
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # librdkafka postpones a partition's next fetch by fetch.queue.backoff.ms (default 1000) whenever its
    # local queue holds more than queued.min.messages (100,000); a broker that fills that faster than
    # Python drains it turns the default into one-second stalls (measured here: ~116 MiB/s against ~320).
    "fetch.queue.backoff.ms": 10,
}


def produce_phase(bench: ClientBench) -> Phase:
    settings = bench.settings
    deadline = Deadline("produce", settings.phase_timeout_s)
    bench.create_topic("bench-produce", deadline)
    producer = Producer(bench.config(THROUGHPUT_PRODUCER, "producer"))
    try:
        producer.list_topics("bench-produce", timeout=max(0.1, deadline.remaining()))  # connected before the clock
    except KafkaException as exc:
        raise PhaseError(f"the producer got no metadata for bench-produce: {exc.args[0]}") from None
    watch = bench.produce(producer, "bench-produce", settings.messages, deadline, "produced")
    elapsed = watch.elapsed_s
    rate = throughput_mib_s(settings.messages * settings.message_bytes, elapsed)
    figure = Figure("produce_throughput", f"(a) produce, 1 KiB msgs, {settings.partitions} partitions, RF1, acks=1",
                    rate, "MiB/s", PRODUCE_TARGET_MIB_S)
    return Phase("produce", f"{settings.messages:,} x {settings.message_bytes} B in {elapsed:.2f} s "
                       f"({settings.messages / elapsed:,.0f} msg/s)", elapsed, [figure],
                       {"messages": settings.messages, "producer": THROUGHPUT_PRODUCER}, watch.cpu_s)


def consume_phase(bench: ClientBench) -> Phase:
    """Fill a topic (its own deadline), then time an assign()-ed consumer reading all of it."""
    settings = bench.settings
    count = settings.size_mib * MIB // settings.message_bytes
    deadline = Deadline("consume phase's fill", settings.phase_timeout_s)
    bench.create_topic("bench-consume", deadline)
    bench.say(f"filling bench-consume with {settings.size_mib:,} MiB ...")
    producer = Producer(bench.config(THROUGHPUT_PRODUCER, "filler"))
    fill = bench.produce(producer, "bench-consume", count, deadline, "filler")
    fill_s = fill.elapsed_s

    deadline = Deadline("consume", settings.phase_timeout_s)
    closed_before = bench.client_log.broker_closed_connections()
    consumer = confluent_kafka.Consumer(bench.config(CONSUMER, "consumer"))
    try:
        partitions = [TopicPartition("bench-consume", p) for p in range(settings.partitions)]
        try:
            bounds = {tp.partition: consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline.remaining()))
                      for tp in partitions}
        except KafkaException as exc:
            raise PhaseError(f"ListOffsets for bench-consume failed: {exc.args[0]}") from None
        expected = sum(high - low for low, high in bounds.values())
        if expected != count:
            raise PhaseError(f"bench-consume holds {expected:,} messages, {count:,} were acknowledged")
        received = value_bytes = 0
        progress = lambda: f"{received:,} of {expected:,} messages consumed"  # noqa: E731
        watch = Stopwatch(bench.meter)
        consumer.assign([TopicPartition("bench-consume", p, low) for p, (low, _) in bounds.items()])
        while received < expected:
            deadline.check(progress)
            # consume(n, timeout) waits until n messages are there or the timeout passes: take what is
            # queued without waiting, and wait only for the first message of the next batch.
            batch = consumer.consume(10_000, timeout=0) or consumer.consume(1, timeout=min(0.5, deadline.remaining()))
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise PhaseError(f"the consumer got {error} after {progress()}")
                received += 1
                value_bytes += len(message.value())
        elapsed = watch.stop()
    finally:
        consumer.close()
    closed = bench.client_log.broker_closed_connections() - closed_before
    figure = Figure("consume_throughput", f"(b) consume {settings.size_mib:,} MiB from the beginning, assign()",
                    throughput_mib_s(value_bytes, elapsed), "MiB/s", CONSUME_TARGET_MIB_S)
    return Phase(
        "consume", f"{received:,} msgs in {elapsed:.2f} s after a fill at "
                   f"{throughput_mib_s(count * settings.message_bytes, fill_s):,.1f} MiB/s ({fill_s:.1f} s); "
                   f"brokers closed {closed} consumer connection(s)",
        elapsed, [figure],
        {"messages": received, "value_bytes": value_bytes, "fill_s": round(fill_s, 3),
         "fill_mib_s": round(throughput_mib_s(count * settings.message_bytes, fill_s), 1),
         "fill_cpu_s": fill.cpu_s, "connections_closed_by_brokers": closed, "consumer": CONSUMER}, watch.cpu_s)


def latency_phase(bench: ClientBench) -> Phase:
    settings = bench.settings
    deadline = Deadline("latency", settings.phase_timeout_s)
    bench.create_topic("bench-latency", deadline)
    count = settings.latency_messages
    sample = measure_latency(bench, "bench-latency", LATENCY_PRODUCER, "latency", count, settings.latency_rate,
                             deadline)
    latencies_ms = sample.latencies_ms
    label = f"(c) produce latency at {settings.latency_rate} msg/s, acks=1, linger.ms=0"
    figures = [Figure("produce_latency_p50", f"{label}, p50", percentile(latencies_ms, 50), "ms", None, False),
               Figure("produce_latency_p99", f"{label}, p99", percentile(latencies_ms, 99), "ms", None, False)]
    librdkafka = sample.librdkafka_percentiles()
    return Phase(
        "latency", f"{count:,} msgs sent at {sample.achieved_rate:,.0f} msg/s; max {max(latencies_ms):.1f} ms; "
                   f"librdkafka's own p50/p99 (no callback dispatch) "
                   f"{librdkafka.get('p50', float('nan')):.2f}/{librdkafka.get('p99', float('nan')):.2f} ms",
        sample.watch.elapsed_s, figures,
        {"messages": count, "achieved_rate": round(sample.achieved_rate, 1), "max_ms": round(max(latencies_ms), 3),
         "librdkafka_latency_ms": librdkafka, "producer": LATENCY_PRODUCER}, sample.watch.cpu_s)


PHASES = (("produce", produce_phase), ("consume", consume_phase), ("latency", latency_phase))
