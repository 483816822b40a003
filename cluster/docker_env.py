"""A broker configured from the environment, in the convention of Confluent's Kafka images.

``KAFKA_BROKER_ID=1`` becomes ``broker.id=1``: drop the prefix, lower case, ``_`` becomes ``.``, ``__``
becomes ``_`` and ``___`` becomes ``-`` (Confluent's rule), so compose files written for those images carry
over. kafkasim's own properties come from ``KAFKASIM_*`` the same way (``KAFKASIM_PROFILE=classroom`` is
``kafkasim.profile=classroom``). This is the container's entry point and its healthcheck:

    python -m cluster.docker_env            run the broker
    python -m cluster.docker_env --check    exit 0 when the broker is registered and serves Metadata
    python -m cluster.docker_env --status   the cluster's state in ZooKeeper, as JSON (for tools on the host)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import javaproperties

# Variables of the Confluent images (and kafkasim's own) that configure the process, not the broker.
NOT_PROPERTIES = frozenset({
    "KAFKA_VERSION", "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JMX_OPTS", "KAFKA_JMX_PORT", "KAFKA_JMX_HOSTNAME",
    "KAFKA_LOG4J_OPTS", "KAFKA_LOG4J_ROOT_LOGLEVEL", "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL",
    "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_GC_LOG_OPTS",
    "KAFKASIM_DATA_DIR", "KAFKASIM_ZOOKEEPER_JAR", "KAFKASIM_CONFIG_FILE",
})
PREFIXES = {"KAFKA_": "", "KAFKASIM_": "kafkasim."}
DEFAULT_CONFIG_FILE = "/etc/kafkasim/server.properties"


def property_name(variable: str, prefix: str) -> str:
    name = variable[len(prefix):].lower()
    # Confluent's order: the longest runs first, so ___ is not read as __ and _
    return name.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_")


def properties_from_env(env: Mapping[str, str]) -> dict[str, str]:
    props = {}
    for variable, value in sorted(env.items()):
        if variable in NOT_PROPERTIES:
            continue
        prefix = next((p for p in PREFIXES if variable.startswith(p) and len(variable) > len(p)), None)
        if prefix is not None:
            props[PREFIXES[prefix] + property_name(variable, prefix)] = value
    return props


def render_properties(props: Mapping[str, str], comment: str | None = None) -> str:
    return javaproperties.dumps(props, comments=comment, timestamp=False, sort_keys=True)


def write_config(env: Mapping[str, str]) -> Path:
    """The properties are written to a file the broker reads, so ``docker exec ... cat`` shows what it runs with."""
    path = Path(env.get("KAFKASIM_CONFIG_FILE", DEFAULT_CONFIG_FILE))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_properties(properties_from_env(env),
                                      " written from the container's KAFKA_* and KAFKASIM_* environment"),
                    encoding="latin-1")
    return path


async def _registered(zk_connect: str, broker_id: int) -> bool:
    from zk.client import connected

    async with connected(zk_connect) as zk:
        return await zk.exists(f"/brokers/ids/{broker_id}") is not None


def _serves_metadata(host: str, port: int, broker_id: int, timeout_s: float) -> bool:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": f"{host}:{port}", "log_level": 0,
                         "socket.connection.setup.timeout.ms": int(timeout_s * 1000)})
    metadata = admin.list_topics(timeout=timeout_s)
    return broker_id in metadata.brokers


def check(env: Mapping[str, str], timeout_s: float = 5.0) -> str | None:
    """None when the broker is healthy, else what is missing."""
    from broker.config import ConfigError, KafkaConfig

    try:
        config = KafkaConfig.from_properties(properties_from_env(env), "environment")
    except ConfigError as exc:
        return str(exc)
    try:
        if not asyncio.run(asyncio.wait_for(_registered(config.zookeeper_connect, config.broker_id), timeout_s)):
            return f"broker {config.broker_id} is not registered in ZooKeeper"
    except Exception as exc:
        return f"ZooKeeper {config.zookeeper_connect}: {exc or type(exc).__name__}"
    listener = config.client_listeners[0]
    host = listener.host if listener.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    try:
        if not _serves_metadata(host, listener.port, config.broker_id, timeout_s):
            return f"Metadata from {host}:{listener.port} does not list broker {config.broker_id}"
    except Exception as exc:
        return f"Metadata from {host}:{listener.port}: {exc}"
    return None


async def _state_json(zk_connect: str) -> str:
    from cluster.admin import read_cluster_state
    from zk.client import connected

    async with connected(zk_connect) as zk:
        return json.dumps((await read_cluster_state(zk)).as_dict())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster.docker_env", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="healthcheck: registered and serving Metadata")
    parser.add_argument("--status", action="store_true", help="print the cluster's state in ZooKeeper as JSON")
    parser.add_argument("--print", action="store_true", help="print the properties the environment gives")
    args = parser.parse_args(argv)
    if args.print:
        print(render_properties(properties_from_env(os.environ)), end="")
        return 0
    if args.status:
        connect = properties_from_env(os.environ).get("zookeeper.connect")
        if not connect:
            print("error: KAFKA_ZOOKEEPER_CONNECT is not set", file=sys.stderr)
            return 2
        print(asyncio.run(_state_json(connect)))
        return 0
    if args.check:
        problem = check(os.environ)
        if problem:
            print(f"unhealthy: {problem}", file=sys.stderr)
            return 1
        return 0
    from cluster.cli import main as cli_main

    return cli_main(["broker", "--config", str(write_config(os.environ))])


if __name__ == "__main__":
    sys.exit(main())
