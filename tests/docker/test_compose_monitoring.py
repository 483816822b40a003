"""The compose file's metrics ports and its Prometheus (profile `monitoring`), read without Docker: Compose
parses the file, pyyaml the scrape config. Prometheus itself cannot be pulled on the test machines."""

from __future__ import annotations

import json
import subprocess

import yaml

from broker.config import KafkaConfig
from cluster.docker_env import properties_from_env
from tests.docker.conftest import REPO, compose_command


def compose_config(*profiles: str) -> dict:
    args = [arg for profile in profiles for arg in ("--profile", profile)]
    done = subprocess.run([*compose_command(), "-f", str(REPO / "docker-compose.yml"), *args, "config",
                           "--format", "json"], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def broker_config(service: dict) -> KafkaConfig:
    env = {key: str(value) for key, value in service["environment"].items()}
    return KafkaConfig.from_properties(properties_from_env(env))


def test_the_metrics_port_is_a_broker_property_from_the_environment():
    assert properties_from_env({"KAFKASIM_METRICS_PORT": "9404"}) == {"kafkasim.metrics.port": "9404"}


def test_every_compose_broker_serves_metrics_on_a_published_port():
    services = compose_config()["services"]
    assert "prometheus" not in services  # only with --profile monitoring
    published = set()
    for name in ("kafka-1", "kafka-2", "kafka-3"):
        config = broker_config(services[name])
        assert config.metrics_port == 9404
        assert config.metrics_host == "0.0.0.0"
        ports = {int(p["target"]): int(p["published"]) for p in services[name]["ports"]}
        published.add(ports[config.metrics_port])
    assert published == {9292, 9293, 9294}


def test_the_monitoring_profile_scrapes_every_broker():
    services = compose_config("monitoring")["services"]
    prometheus = services["prometheus"]
    assert prometheus["profiles"] == ["monitoring"]
    assert prometheus["image"].startswith("prom/prometheus")
    mount = next(v for v in prometheus["volumes"] if v["target"] == "/etc/prometheus/prometheus.yml")
    scrape = yaml.safe_load((REPO / "docker" / "prometheus" / "prometheus.yml").read_text())
    assert mount["source"] == str(REPO / "docker" / "prometheus" / "prometheus.yml")
    assert f"--config.file={mount['target']}" in prometheus["command"]
    targets = [t for job in scrape["scrape_configs"] for static in job["static_configs"] for t in static["targets"]]
    expected = [f"{services[name]['hostname']}:{broker_config(services[name]).metrics_port}"
                for name in ("kafka-1", "kafka-2", "kafka-3")]
    assert targets == expected
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in scrape["scrape_configs"])
