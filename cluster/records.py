"""``kafkasim records delete``: DeleteRecords through the Kafka protocol with confluent-kafka's AdminClient (sent to
each partition's leader), like kafka-delete-records.sh: the offsets come from the command line or from Kafka's
``--offset-json-file``. Prints one line per partition: its new low watermark, or why not."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from cluster.processes import ClusterError

TIMEOUT_S = 30
# how long each leader may wait for its followers' log starts (the request's timeout); kafka-delete-records.sh's
# AdminClient waits default.api.timeout.ms
OPERATION_TIMEOUT_S = 20


def parse_offset_json(text: str, source: str = "the offset JSON") -> dict[tuple[str, int], int]:
    """Kafka's format (kafka-delete-records.sh --offset-json-file):
    ``{"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}``; offset -1 means the high
    watermark."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(f"{source} is not JSON ({exc}); expected "
                           '{"partitions": [{"topic": "foo", "partition": 0, "offset": 10}], "version": 1}') from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ClusterError(f'{source} has no "partitions" list; expected '
                           '{"partitions": [{"topic": "foo", "partition": 0, "offset": 10}], "version": 1}')
    offsets: dict[tuple[str, int], int] = {}
    for entry in entries:
        try:
            topic, partition, offset = entry["topic"], entry["partition"], entry["offset"]
        except (KeyError, TypeError):
            raise ClusterError(f'{source}: every partition needs "topic", "partition" and "offset": {entry}') from None
        if not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(offset, int):
            raise ClusterError(f"{source}: topic is a string, partition and offset are integers: {entry}")
        if (topic, partition) in offsets:
            # kafka-delete-records.sh refuses it the same way ("Offset json file contains duplicate topic partitions")
            raise ClusterError(f"{source} names {topic}-{partition} twice")
        if offset < -1:
            raise ClusterError(f"{source}: offset {offset} of {topic}-{partition}: give an offset >= 0, or -1 for "
                               "the high watermark")
        offsets[(topic, partition)] = offset
    return offsets


def offsets_from(topic: str | None, partition: int | None, offset: int | None,
                 json_file: Path | None) -> dict[tuple[str, int], int]:
    if json_file is not None:
        if topic is not None or partition is not None or offset is not None:
            raise ClusterError("give either --offset-json-file or --topic/--partition/--offset, not both")
        try:
            text = json_file.read_text()
        except OSError as exc:
            raise ClusterError(f"cannot read {json_file}: {exc.strerror}") from None
        return parse_offset_json(text, str(json_file))
    if topic is None or offset is None:
        raise ClusterError("give --topic and --offset (and --partition, default 0), or --offset-json-file")
    if offset < -1:
        raise ClusterError(f"--offset {offset}: give an offset >= 0, or -1 for the high watermark")
    return {(topic, 0 if partition is None else partition): offset}


def delete(bootstrap: str, offsets: dict[tuple[str, int], int]) -> int:
    """Returns 0 when every partition's records below its offset are deleted on every live replica, 1 otherwise."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        futures = admin.delete_records([TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                       request_timeout=TIMEOUT_S, operation_timeout=OPERATION_TIMEOUT_S)
    except KafkaException as exc:
        raise ClusterError(f"DeleteRecords failed: {exc.args[0]}; is the cluster up (`kafkasim status`)?") from None
    failed = 0
    width = max(len(f"{t}-{p}") for t, p in offsets)
    print(f"{'PARTITION':<{width}}  LOW WATERMARK / ERROR")
    for tp in sorted(futures, key=lambda t: (t.topic, t.partition)):
        name = f"{tp.topic}-{tp.partition}"
        try:
            outcome = str(futures[tp].result(TIMEOUT_S).low_watermark)
        except KafkaException as exc:
            failed += 1
            error = exc.args[0]
            outcome = f"{error.name()}: {error.str()}"
        print(f"{name:<{width}}  {outcome}")
    if failed:
        print(f"{failed} partition(s) failed: an offset must not pass the high watermark (`kafkasim topic describe`"
              " shows the partitions; -1 deletes up to the high watermark)", file=sys.stderr)
    return 1 if failed else 0
