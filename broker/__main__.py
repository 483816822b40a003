"""``python -m broker --config server.properties``: run one broker process in the foreground.

`kafkasim broker` calls `main` here: the broker owns its own entry point, so it never imports the tools above it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="server.properties (Kafka property names)")
    parser.add_argument("--override", action="append", metavar="KEY=VALUE", help="override one property")
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="use this ZooKeeper ensemble")


def parse_overrides(pairs: list[str] | None) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override takes KEY=VALUE, got {pair!r}")
        overrides[key.strip()] = value.strip()
    return overrides


def run(config_path: Path, overrides: dict[str, str], zookeeper: str | None) -> int:
    from broker.config import ConfigError, KafkaConfig
    from broker.registration import BrokerIdInUseError
    from broker.server import StartupError, run_broker
    from zk.client import ZkUnavailableError

    if zookeeper:
        overrides = {**overrides, "zookeeper.connect": zookeeper}
    try:
        config = KafkaConfig.from_file(config_path, overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(config.describe(), file=sys.stderr, flush=True)
    try:
        return asyncio.run(run_broker(config))
    except (StartupError, BrokerIdInUseError, ZkUnavailableError) as exc:
        print(f"error: broker {config.broker_id} cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker", description="Run one kafkasim broker in the foreground.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        overrides = parse_overrides(args.override)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args.config, overrides, args.zookeeper)


if __name__ == "__main__":
    sys.exit(main())
