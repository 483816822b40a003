"""``kafkasim config --topic T | --broker N | --broker-defaults --describe | --set k=v ... --delete k ...``:
configuration through the Kafka protocol with confluent-kafka's AdminClient (DescribeConfigs,
IncrementalAlterConfigs), like kafka-configs.sh --bootstrap-server (--entity-default for the cluster-wide broker
default). A change is live: every broker concerned applies it without a restart."""

from __future__ import annotations

import warnings

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kio.schema.errors import ErrorCode

from cluster.processes import ClusterError
from cluster.scenarios.raw_client import call

with warnings.catch_warnings():
    # kafka-python loads its message specs through importlib.resources calls deprecated since Python 3.11
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import (
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )

TIMEOUT_S = 30
DESCRIBE_VERSION, INCREMENTAL_ALTER_VERSION = 1, 0


def parse_assignments(assignments: list[str]) -> dict[str, str]:
    result = {}
    for item in assignments:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ClusterError(f"--set {item!r}: write it as name=value, e.g. --set min.insync.replicas=2")
        result[name.strip()] = value.strip()
    return result


def _resource(topic: str | None, broker: int | None, **incremental) -> tuple[str, ConfigResource]:
    """The entity: a topic, a broker, or (neither) the cluster-wide broker default, named "" as Kafka names it."""
    if topic is not None:
        return f"topic {topic}", ConfigResource(ConfigResource.Type.TOPIC, topic, **incremental)
    if broker is not None:
        return f"broker {broker}", ConfigResource(ConfigResource.Type.BROKER, str(broker), **incremental)
    return "the default broker (every broker)", ConfigResource(ConfigResource.Type.BROKER, "", **incremental)


def describe(bootstrap: str, topic: str | None = None, broker: int | None = None) -> int:
    """A topic's or a broker's every config with its value and source (a broker's read-only ones marked), or with
    neither the cluster-wide default's dynamic configs: the dynamic ones first, as kafka-configs.sh --describe."""
    kind, resource = _resource(topic, broker)
    if topic is None and broker is None:
        entries = {name: (value, source, False) for name, value, source in _describe_default(bootstrap)}
    else:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            described = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
        except KafkaException as exc:
            raise ClusterError(f"DescribeConfigs for {kind} failed: {exc.args[0].str()}") from None
        entries = {name: (e.value, _source(e), topic is None and e.is_read_only) for name, e in described.items()}
    dynamic = {name: value for name, (value, source, _) in entries.items() if source in _DYNAMIC_SOURCES}
    print(f"Dynamic configs for {kind}: " + (", ".join(f"{n}={v}" for n, v in sorted(dynamic.items())) or "none"))
    width = max((len(name) for name in entries), default=0)
    for name, (value, source, read_only) in sorted(entries.items()):
        print(f"  {name:<{width}}  {value!s:<20}  {source.name}{'  (read-only)' if read_only else ''}")
    return 0


def alter(bootstrap: str, to_set: dict[str, str], to_delete: list[str], topic: str | None = None,
          broker: int | None = None) -> int:
    """SET and DELETE operations in one IncrementalAlterConfigs request for a topic, a broker, or (neither) the
    cluster-wide broker default: the other dynamic configs stay."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ops = [ConfigEntry(n, v, incremental_operation=AlterConfigOpType.SET) for n, v in to_set.items()]
    ops += [ConfigEntry(n, None, incremental_operation=AlterConfigOpType.DELETE) for n in to_delete]
    kind, resource = _resource(topic, broker, incremental_configs=ops)
    if topic is None and broker is None:
        _alter_default(bootstrap, kind, to_set, to_delete)
    else:
        try:
            admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            raise ClusterError(f"changing the config of {kind} failed: {error.name()}: {error.str()}") from None
    changes = [f"{n}={v}" for n, v in to_set.items()] + [f"{n} deleted" for n in to_delete]
    print(f"Completed updating config for {kind}: {', '.join(changes)}")
    return 0


_DYNAMIC_SOURCES = (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG,
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)


# --- the cluster-wide default: librdkafka cannot name it (a BROKER resource needs a broker id there), so these two
# requests are sent with kafka-python's protocol classes to the first broker that answers, as the Java AdminClient
# sends a resource named "" to any broker


def _any_broker(bootstrap: str, request, version: int, response_class):
    last: Exception | None = None
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            return call(host, int(port), request, version, response_class, TIMEOUT_S)
        except OSError as exc:
            last = exc
    raise ClusterError(f"no broker of {bootstrap} answered ({last}); is the cluster up?")


def _describe_default(bootstrap: str) -> list[tuple[str, str | None, ConfigSource]]:
    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=ConfigResource.Type.BROKER.value, resource_name="", configuration_keys=None)],
        include_synonyms=False)
    result = _any_broker(bootstrap, request, DESCRIBE_VERSION, DescribeConfigsResponse).results[0]
    if result.error_code:
        raise ClusterError(f"DescribeConfigs for the default broker failed: {result.error_message}")
    return [(c.name, c.value, ConfigSource(c.config_source)) for c in result.configs]


def _alter_default(bootstrap: str, kind: str, to_set: dict[str, str], to_delete: list[str]) -> None:
    resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    configs = [resource.AlterableConfig(name=n, config_operation=AlterConfigOpType.SET.value, value=v)
               for n, v in to_set.items()]
    configs += [resource.AlterableConfig(name=n, config_operation=AlterConfigOpType.DELETE.value, value=None)
                for n in to_delete]
    request = IncrementalAlterConfigsRequest(resources=[resource(
        resource_type=ConfigResource.Type.BROKER.value, resource_name="", configs=configs)], validate_only=False)
    answer = _any_broker(bootstrap, request, INCREMENTAL_ALTER_VERSION, IncrementalAlterConfigsResponse).responses[0]
    if answer.error_code:
        raise ClusterError(f"changing the config of {kind} failed: {ErrorCode(answer.error_code).name.upper()}: "
                           f"{answer.error_message}")


def _source(entry: ConfigEntry) -> ConfigSource:
    source = entry.source
    return source if isinstance(source, ConfigSource) else ConfigSource(source)
