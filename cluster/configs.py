"""``kafkasim config --topic T --describe | --set k=v ... --delete k ...`` and ``kafkasim config --broker N
--describe``: configuration through the Kafka protocol with confluent-kafka's AdminClient (DescribeConfigs,
IncrementalAlterConfigs), like kafka-configs.sh --bootstrap-server. A topic change is live: every broker applies
it without a restart. Broker configs are read-only (kafkasim has no dynamic broker configs)."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from cluster.processes import ClusterError

TIMEOUT_S = 30


def parse_assignments(assignments: list[str]) -> dict[str, str]:
    result = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ClusterError(f"--set {item!r}: write it as name=value, e.g. --set min.insync.replicas=2")
        result[name.strip()] = value.strip()
    return result


def describe(bootstrap: str, topic: str | None = None, broker: int | None = None) -> int:
    """One of ``topic`` or ``broker``: every config with its value and source."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic is not None:
        kind, resource = f"topic {topic}", ConfigResource(ConfigResource.Type.TOPIC, topic)
    else:
        kind, resource = f"broker {broker}", ConfigResource(ConfigResource.Type.BROKER, str(broker))
    try:
        entries = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    except KafkaException as exc:
        raise ClusterError(f"DescribeConfigs for {kind} failed: {exc.args[0].str()}") from None
    dynamic = {name: e for name, e in entries.items() if _source(e) == ConfigSource.DYNAMIC_TOPIC_CONFIG}
    print(f"Dynamic configs for {kind}: "
          + (", ".join(f"{n}={e.value}" for n, e in sorted(dynamic.items())) or "none"))
    width = max(len(name) for name in entries)
    for name, entry in sorted(entries.items()):
        print(f"  {name:<{width}}  {entry.value!s:<20}  {_source(entry).name}")
    return 0


def alter(bootstrap: str, topic: str, to_set: dict[str, str], to_delete: list[str]) -> int:
    """SET and DELETE operations in one IncrementalAlterConfigs request: the other overrides stay."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ops = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in to_set.items()]
    ops += [ConfigEntry(n, None, incremental_operation=AlterConfigOpType.DELETE) for n in to_delete]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=ops)
    try:
        admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0]
        raise ClusterError(f"changing the config of topic {topic} failed: {error.name()}: {error.str()}") from None
    changes = [f"{n}={v}" for n, v in to_set.items()] + [f"{n} deleted" for n in to_delete]
    print(f"Completed updating config for topic {topic}: {', '.join(changes)}")
    return 0


def _source(entry: ConfigEntry) -> ConfigSource:
    source = entry.source
    return source if isinstance(source, ConfigSource) else ConfigSource(source)
