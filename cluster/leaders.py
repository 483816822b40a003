"""``kafkasim leaders elect``: preferred (or unclean) leader elections through the Kafka protocol, with
confluent-kafka's AdminClient (ElectLeaders, sent to the controller), like kafka-leader-election.sh. Prints one
line per partition: elected, not needed, or why not."""

from __future__ import annotations

import sys

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from cluster.processes import ClusterError

TIMEOUT_S = 30


def _partitions(admin: AdminClient, topic: str | None, partition: int | None) -> list[TopicPartition] | None:
    if topic is None:
        return None  # every partition: the controller answers for those it elected or could not
    try:
        # all topics: a Metadata request naming an unknown topic may auto-create it
        topics = admin.list_topics(timeout=TIMEOUT_S).topics
    except KafkaException as exc:
        raise ClusterError(f"reading the metadata failed: {exc.args[0]}; is the cluster up (`kafkasim status`)?"
                           ) from None
    if topic not in topics:
        raise ClusterError(f"topic {topic} does not exist; `kafkasim topic describe` lists the topics")
    known = sorted(topics[topic].partitions)
    if partition is None:
        return [TopicPartition(topic, p) for p in known]
    if partition not in known:
        raise ClusterError(f"topic {topic} has no partition {partition}: its partitions are "
                           f"{', '.join(map(str, known))}")
    return [TopicPartition(topic, partition)]


def elect(bootstrap: str, topic: str | None, partition: int | None, unclean: bool) -> int:
    """Returns 0 when every partition has the leader asked for (elected now or already), 1 otherwise."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer is in
    election = ElectionType.UNCLEAN if unclean else ElectionType.PREFERRED
    partitions = _partitions(admin, topic, partition)
    try:
        # no timeout arguments: confluent-kafka 2.16's elect_leaders fails with SystemError on any keyword
        results = admin.elect_leaders(election, partitions).result(TIMEOUT_S)
    except KafkaException as exc:
        raise ClusterError(f"ElectLeaders failed: {exc.args[0]}; is the cluster up (`kafkasim status`)?") from None
    if not results:
        print("every partition already has a live leader" if unclean
              else "every partition is led by its preferred replica: no election needed")
        return 0
    leaders = {}
    try:
        for name, metadata in admin.list_topics(timeout=TIMEOUT_S).topics.items():
            for p, info in metadata.partitions.items():
                leaders[(name, p)] = info.leader
    except KafkaException:
        pass  # the results stand without the leader column
    failed = 0
    width = max(len(tp.topic) for tp in results)
    print(f"{'TOPIC':<{width}}  PARTITION  LEADER  RESULT")
    for tp in sorted(results, key=lambda t: (t.topic, t.partition)):
        error = results[tp]
        # confluent-kafka 2.16 gives KafkaError values here; its docstring says KafkaException
        if isinstance(error, KafkaException):
            error = error.args[0]
        if error is None:
            outcome = "elected"
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            outcome = "not needed: " + ("it has a live leader" if unclean else "led by its preferred replica")
        else:
            failed += 1
            outcome = f"{error.name()}: {error.str()}"
        leader = leaders.get((tp.topic, tp.partition), "?")
        print(f"{tp.topic:<{width}}  {tp.partition:>9}  {leader!s:>6}  {outcome}")
    if failed:
        print(f"{failed} partition(s) kept their leader; `kafkasim topic describe` shows their ISR", file=sys.stderr)
    return 1 if failed else 0
