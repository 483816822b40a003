"""kafkasim's chaos actions on a docker-compose cluster, through the Docker Engine API (the ``docker`` SDK).

The cluster is found by Compose's own container labels: its brokers are the containers of one project
that carry ``KAFKA_BROKER_ID``. Who leads what is read from ZooKeeper by running
``python -m cluster.docker_env --status`` in a running broker, so no port beyond the brokers' is published.
Every action is written to the tools' trace before it is done, like the local ``kafkasim kill``.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cluster.processes import ClusterError
from traces.faults import TOOLS_TRACE_FILE, record_fault

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
BROKER_LOG_DIR = "/var/lib/kafka/data"


def _client():
    import docker
    from docker.errors import DockerException

    try:
        return docker.from_env()
    except DockerException as exc:
        raise ClusterError(f"cannot reach the Docker engine: {exc}") from None


def _env(container) -> dict[str, str]:
    pairs = (item.partition("=") for item in container.attrs["Config"].get("Env") or [])
    return {key: value for key, _, value in pairs}


@dataclass
class DockerCluster:
    """The brokers of one compose project."""

    project: str
    client: object
    tools_trace: Path

    @classmethod
    def find(cls, project: str | None, tools_dir: Path) -> DockerCluster:
        client = _client()
        projects = {c.labels[PROJECT_LABEL] for c in client.containers.list(all=True, filters={"label": PROJECT_LABEL})
                    if "KAFKA_BROKER_ID" in _env(c) and (project is None or c.labels[PROJECT_LABEL] == project)}
        if not projects:
            where = f"compose project {project!r}" if project else "any compose project"
            raise ClusterError(f"no kafkasim broker containers in {where} (is it up? 'docker compose up -d')")
        if len(projects) > 1:
            raise ClusterError(f"brokers of several compose projects are here ({', '.join(sorted(projects))}): "
                               "choose one with --project")
        name = projects.pop()
        return cls(name, client, tools_dir / name / TOOLS_TRACE_FILE)

    def brokers(self) -> dict[int, object]:
        found = {}
        for container in self.client.containers.list(all=True, filters={"label": f"{PROJECT_LABEL}={self.project}"}):
            broker_id = _env(container).get("KAFKA_BROKER_ID", "")
            if broker_id.isdigit():
                found[int(broker_id)] = container
        return found

    def container(self, broker_id: int):
        brokers = self.brokers()
        if broker_id not in brokers:
            raise ClusterError(f"broker {broker_id} is not a container of compose project {self.project} "
                               f"(brokers: {', '.join(map(str, sorted(brokers)))})")
        return brokers[broker_id]

    # --- what ZooKeeper says --------------------------------------------------------------------------

    def state(self) -> dict:
        """The cluster state from ZooKeeper, asked through the first broker container that answers."""
        problems = []
        for broker_id, container in sorted(self.brokers().items()):
            container.reload()
            # a paused or cut-off broker cannot answer (or would only time out reaching ZooKeeper)
            if container.status != "running" or not container.attrs["NetworkSettings"]["Networks"]:
                continue
            result = container.exec_run(["python", "-m", "cluster.docker_env", "--status"], demux=True)
            out, err = result.output
            if result.exit_code == 0 and out:
                return json.loads(out)
            problems.append(f"broker {broker_id}: {(err or b'').decode(errors='replace').strip()[-300:]}")
        raise ClusterError("no running broker container could read the cluster state"
                           + ("".join(f"\n  {p}" for p in problems)))

    def partition(self, topic: str, partition: int) -> dict:
        view = next((p for p in self.state()["partitions"]
                     if (p["topic"], p["partition"]) == (topic, partition)), None)
        if view is None:
            raise ClusterError(f"partition {topic}/{partition} does not exist")
        return view

    def resolve(self, broker_id: int | None, controller: bool = False, leader_of: str | None = None) -> int:
        if broker_id is not None:
            self.container(broker_id)
            return broker_id
        if controller:
            controller_id = self.state()["controller"]["id"]
            if controller_id < 0:
                raise ClusterError("there is no controller right now")
            return controller_id
        topic, _, partition = (leader_of or "").rpartition("/")
        if not topic or not partition.isdigit():
            raise ClusterError(f"--leader-of takes TOPIC/PARTITION, got {leader_of!r}")
        leader = self.partition(topic, int(partition))["leader"]
        if leader < 0:
            raise ClusterError(f"partition {topic}/{partition} has no leader right now")
        return leader

    # --- faults ---------------------------------------------------------------------------------------

    def _act(self, broker_id: int, action: str, do: Callable[[object], None], detail: str = "") -> str:
        from docker.errors import APIError

        container = self.container(broker_id)
        target = f"broker {broker_id} (container {container.name})"
        record_fault(self.tools_trace, action, target, broker_id=broker_id, detail=detail)
        try:
            do(container)
        except APIError as exc:
            raise ClusterError(f"{action} {target}: {exc.explanation or exc}") from None
        return target

    def kill(self, broker_id: int, signal: str = "KILL") -> str:
        return self._act(broker_id, f"sig{signal.lower()}", lambda c: c.kill(signal=f"SIG{signal}"))

    def start(self, broker_id: int) -> str:
        return self._act(broker_id, "start", lambda c: c.start())

    def pause(self, broker_id: int) -> str:
        return self._act(broker_id, "pause", lambda c: c.pause())

    def unpause(self, broker_id: int) -> str:
        return self._act(broker_id, "resume", lambda c: c.unpause())

    def _project_networks(self) -> list:
        return self.client.networks.list(filters={"label": f"{PROJECT_LABEL}={self.project}"})

    def disconnect(self, broker_id: int) -> str:
        """Cut the broker off every network of the project: ZooKeeper, the other brokers and clients lose it."""
        container = self.container(broker_id)
        attached = set(container.attrs["NetworkSettings"]["Networks"])
        networks = [n for n in self._project_networks() if n.name in attached]
        if not networks:
            raise ClusterError(f"broker {broker_id} is not on any network of project {self.project}")
        return self._act(broker_id, "disconnect", lambda c: [n.disconnect(c) for n in networks],
                         detail=", ".join(n.name for n in networks))

    def connect(self, broker_id: int) -> str:
        """Back on the project's networks, under its service name again so the others find it."""
        container = self.container(broker_id)
        attached = set(container.attrs["NetworkSettings"]["Networks"])
        networks = [n for n in self._project_networks() if n.name not in attached]
        if not networks:
            raise ClusterError(f"broker {broker_id} is connected to every network of project {self.project}")
        aliases = [container.labels.get(SERVICE_LABEL, container.name), container.id[:12]]
        return self._act(broker_id, "connect", lambda c: [n.connect(c, aliases=aliases) for n in networks],
                         detail=", ".join(n.name for n in networks))

    # --- traces ---------------------------------------------------------------------------------------

    def copy_out(self, staging: Path) -> Path:
        """Each broker's log dir (its trace file and segments) into ``staging/broker-N/logs``, the layout
        ``kafkasim traces collect`` reads; stopped containers too, since ``docker cp`` works on them."""
        from docker.errors import APIError

        for broker_id, container in sorted(self.brokers().items()):
            try:
                chunks, _ = container.get_archive(BROKER_LOG_DIR)
            except APIError as exc:
                raise ClusterError(f"cannot copy {BROKER_LOG_DIR} out of {container.name}: {exc.explanation}") from None
            target = staging / f"broker-{broker_id}"
            target.mkdir(parents=True)
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
                archive.extractall(target, filter="data")
            (target / Path(BROKER_LOG_DIR).name).rename(target / "logs")
        if self.tools_trace.exists():
            shutil.copy2(self.tools_trace, staging / TOOLS_TRACE_FILE)
        return staging


def collect_docker_traces(project: str | None, tools_dir: Path, out: Path):
    """``kafkasim traces collect --docker``: the compose cluster's traces and logs, collected on the host."""
    from cluster.traces_cmd import collect

    cluster = DockerCluster.find(project, tools_dir)
    with tempfile.TemporaryDirectory(prefix="kafkasim-docker-") as tmp:
        staging = cluster.copy_out(Path(tmp) / cluster.project)
        return collect([staging], out)


def run_docker_command(command: str, project: str | None, tools_dir: Path, broker_id: int | None = None,
                       controller: bool = False, leader_of: str | None = None, signal: str = "KILL",
                       out: Path | None = None) -> int:
    """The ``--docker`` forms of kill, start, pause, unpause, disconnect, connect and traces collect."""
    if command == "traces":
        from cluster.traces_cmd import default_out

        print(collect_docker_traces(project, tools_dir, out or default_out(tools_dir)).summary())
        return 0
    cluster = DockerCluster.find(project, tools_dir)
    target_id = cluster.resolve(broker_id, controller, leader_of)
    if command == "kill":
        print(f"sent SIG{signal} to {cluster.kill(target_id, signal)}")
    else:
        done = {"start": "started", "pause": "paused", "unpause": "unpaused", "disconnect": "disconnected",
                "connect": "connected"}
        print(f"{done[command]} {getattr(cluster, command)(target_id)}")
    return 0
