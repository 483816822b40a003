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
