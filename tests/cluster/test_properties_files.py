"""The .properties files kafkasim writes read back exactly, by kafkasim's reader and by Java's rules."""

from __future__ import annotations

import javaproperties
import pytest

from broker.config import KafkaConfig, parse_properties
from cluster.docker_env import render_properties, write_config
from cluster.processes import write_properties

AWKWARD = {
    "plain.key": "plain value",
    "key with spaces": "value with  two spaces",
    "key=with=equals": "a=b=c",
    "key:with:colons": "PLAINTEXT://127.0.0.1:9092,CLUSTER://127.0.0.1:9192",
    "#not.a.comment": "#not a comment either",
    "!nor.this": "!bang",
    "back\\slash": "C:\\kafka\\logs\\",
    "unicode.é": "café ☕ 𝄞",
    "multi.line": "first\nsecond\r\nthird\tend",
    "empty": "",
}


def test_written_properties_read_back_unchanged(tmp_path):
    path = tmp_path / "server.properties"
    write_properties(path, AWKWARD)
    assert parse_properties(path.read_text()) == AWKWARD
    # the file is pure ASCII, so Java's Latin-1 Properties.load reads the same thing
    with open(path, encoding="latin-1") as java_view:
        assert javaproperties.load(java_view) == AWKWARD
    assert path.read_text().startswith("# written by kafkasim up")


@pytest.mark.parametrize("value", ["x=y", "a:b", "#c", "d\\e", "ünï", "line\nbreak"])
def test_each_awkward_character_survives_alone(tmp_path, value):
    path = tmp_path / "one.properties"
    write_properties(path, {"broker.rack": value})
    assert parse_properties(path.read_text())["broker.rack"] == value


def test_the_container_file_round_trips_and_stays_sorted(tmp_path):
    env = {"KAFKA_BROKER_ID": "7", "KAFKA_ZOOKEEPER_CONNECT": "zookeeper:2181",
           "KAFKA_BROKER_RACK": "rack=é:1", "KAFKASIM_CONFIG_FILE": str(tmp_path / "server.properties")}
    path = write_config(env)
    config = KafkaConfig.from_file(path)
    assert (config.broker_id, config.zookeeper_connect, config.broker_rack) == (7, "zookeeper:2181", "rack=é:1")
    keys = [line.split("=", 1)[0] for line in render_properties({"b": "1", "a": "2"}).splitlines()]
    assert keys == ["a", "b"]
