"""The fault buttons: each calls the very function the CLI command calls, so a button and ``kafkasim kill 2``
do the same thing and leave the same line in the tools' trace (which the feed shows)."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from pathlib import Path

from cluster.processes import ClusterError, ClusterLayout

# action -> what the CLI command is, for the confirmation and the docs
ACTIONS = {
    "kill": "kafkasim kill BROKER (kill -9)",
    "pause": "kafkasim kill BROKER --signal STOP",
    "resume": "kafkasim kill BROKER --signal CONT",
    "start": "kafkasim start BROKER",
    "isolate": "kafkasim net isolate BROKER --from PEERS",
    "heal": "kafkasim net heal",
}
SIGNALS = {"kill": signal.SIGKILL, "pause": signal.SIGSTOP, "resume": signal.SIGCONT}
PEERS = ("zookeeper", "brokers", "clients", "all")


class FaultRefused(ValueError):
    """A request the dashboard will not carry out (a bad action or broker); the message says why."""


@dataclass(frozen=True)
class FaultRequest:
    action: str
    broker_id: int | None = None
    peers: str = "all"

    @classmethod
    def from_json(cls, body: object) -> FaultRequest:
        if not isinstance(body, dict) or body.get("action") not in ACTIONS:
            raise FaultRefused(f"action must be one of {', '.join(ACTIONS)}")
        action = body["action"]
        broker = body.get("broker")
        if action != "heal" and not isinstance(broker, int):
            raise FaultRefused(f"{action} needs a broker id")
        peers = body.get("peers", "all")
        if peers not in PEERS:
            raise FaultRefused(f"peers must be one of {', '.join(PEERS)}")
        return cls(action, broker if action != "heal" else None, peers)


async def carry_out(data_dir: Path, request: FaultRequest) -> str:
    """Runs the fault; a ClusterError (not running, not a --netns cluster, ...) goes back to the page."""
    from cluster import commands

    layout = ClusterLayout(data_dir)
    if request.action in SIGNALS:
        spec = layout.load()
        await commands.kill(data_dir, spec, request.broker_id, False, None, SIGNALS[request.action])
        return f"{request.action}: broker {request.broker_id}"
    if request.action == "start":
        from cluster.lifecycle import start_broker

        # not waiting for the registration: the page shows it arrive
        pid = await asyncio.to_thread(start_broker, data_dir, request.broker_id, False, lambda _: None)
        return f"started broker {request.broker_id} (pid {pid})"
    from cluster.net import actions
    from cluster.net.faults import FaultError

    try:
        if request.action == "isolate":
            await asyncio.to_thread(actions.isolate, data_dir, request.broker_id, request.peers, lambda _: None)
            return f"broker {request.broker_id} cut off from {request.peers}"
        healed = await asyncio.to_thread(actions.heal, data_dir, lambda _: None)
        return "healed: " + (", ".join(healed) if healed else "nothing was cut")
    except FaultError as exc:
        raise ClusterError(str(exc)) from None


# the --docker forms: each button is the CLI's `kafkasim ... --docker` command on the compose cluster
DOCKER_COMMANDS = {"kill": "kill", "pause": "pause", "resume": "unpause", "start": "start", "isolate": "disconnect"}


async def carry_out_docker(tools_dir: Path, request: FaultRequest) -> str:
    """The fault on the docker-compose cluster, through the Docker Engine API (the socket must be mounted).
    Compose has one network, so a broker is isolated from everything or nothing, and heal connects every
    disconnected broker again."""
    from cluster.docker_ops import DockerCluster, run_docker_command

    if request.action == "heal":
        def heal() -> str:
            cluster = DockerCluster.find(None, tools_dir)
            connected = []
            for broker_id in sorted(cluster.brokers()):
                try:
                    connected.append(cluster.connect(broker_id))
                except ClusterError:
                    pass  # on every network already
            return "connected " + ", ".join(connected) if connected else "nothing was disconnected"

        return await asyncio.to_thread(heal)
    if request.action == "isolate" and request.peers != "all":
        raise ClusterError("on the docker-compose cluster a broker can only be cut off from everything (isolate "
                           "from all): Compose puts every container on one network")
    command = DOCKER_COMMANDS[request.action]
    await asyncio.to_thread(run_docker_command, command, None, tools_dir, request.broker_id)
    return f"{request.action}: broker {request.broker_id}"


def docker_process_states(tools_dir: Path) -> tuple[dict[int, str], Path]:
    """broker id -> running, paused or down, from the compose containers' states, and the project's tools trace
    (where the buttons and `kafkasim ... --docker` record their faults). Blocking."""
    from cluster.docker_ops import DockerCluster

    cluster = DockerCluster.find(None, tools_dir)
    states = {}
    for broker_id, container in cluster.brokers().items():
        states[broker_id] = {"running": "running", "paused": "paused"}.get(container.status, "down")
    return states, cluster.tools_trace
