"""kcat 1.7.1 (librdkafka 2.0.2, Debian's): listing, producing with every codec, consuming to the end.

That librdkafka compresses with gzip, snappy and lz4 only if the broker advertises Produce v0
(wire-compat.md section 0), so each test also checks the codec of the batches actually stored."""

import shutil
import subprocess

import pytest

from tests.client.support import bootstrap, create_topic, fetch_batches

pytestmark = [
    pytest.mark.processes,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/setup.sh"),
]

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


def kcat(cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(["kcat", "-b", bootstrap(cluster), *args], input=stdin, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, f"kcat {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result


def test_kcat_lists_the_brokers_the_controller_and_a_topic(cluster):
    create_topic(cluster, "listed", 2)
    out = kcat(cluster, "-L", "-m", "15").stdout
    assert "3 brokers:" in out
    for broker in cluster.spec.brokers:
        assert f"broker {broker.broker_id} at 127.0.0.1:{broker.client_port}" in out
    assert f"broker {cluster.controller()} at 127.0.0.1:{cluster.spec.broker(cluster.controller()).client_port} " \
           "(controller)" in out
    assert 'topic "listed" with 2 partitions:' in out
    for p in cluster.state(["listed"]).partitions:
        assert f"partition {p.partition}, leader {p.leader}, replicas: {p.leader}, isrs: {p.leader}" in out


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_with_a_codec_and_consumes_every_line_back(cluster, codec):
    topic = f"kcat-{codec}"
    create_topic(cluster, topic, 1)
    lines = [f"{codec} line {i} " + "x" * (i % 50) for i in range(200)]
    produced = kcat(cluster, "-P", "-t", topic, "-p", "0", "-z", codec, "-X", "linger.ms=20",
                    stdin="\n".join(lines) + "\n")
    stored = {b.compression_type for b in fetch_batches(cluster, topic)}
    assert stored == {CODECS[codec]}, f"batches stored with codecs {stored}; kcat said: {produced.stderr}"

    consumed = kcat(cluster, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n")
    assert consumed.stdout.splitlines() == [f"{i} {line}" for i, line in enumerate(lines)], consumed.stderr
    assert f"Reached end of topic {topic} [0] at offset 200: exiting" in consumed.stderr


def test_kcat_consumer_on_an_empty_partition_exits_at_once_with_nothing(cluster):
    create_topic(cluster, "kcat-empty", 1)
    consumed = kcat(cluster, "-C", "-t", "kcat-empty", "-p", "0", "-o", "beginning", "-e")
    assert consumed.stdout == ""
    assert "Reached end of topic kcat-empty [0] at offset 0: exiting" in consumed.stderr


def test_kcat_keys_and_values_arrive_as_written(cluster):
    create_topic(cluster, "kcat-keys", 1)
    kcat(cluster, "-P", "-t", "kcat-keys", "-p", "0", "-K", ":", stdin="k1:v1\nk2:v2\n:no key\n")
    consumed = kcat(cluster, "-C", "-t", "kcat-keys", "-p", "0", "-o", "beginning", "-e", "-f", "%k=%s|")
    assert consumed.stdout == "k1=v1|k2=v2|=no key|"
