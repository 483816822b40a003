"""A partition-state write that ZooKeeper applied but whose answer was lost with the connection: the client sends
it again on the new connection and meets BADVERSION. The controller must recognise the state it finds as its own
write and announce it; decided again from scratch, the partition would need no write and the brokers would never
hear of their new leader. Against a real ZooKeeper, through a relay that drops that one answer."""

import asyncio
import json
import struct

import grpc
import pytest

from broker.registration import create_top_level_paths
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import ControlPlaneServicer, add_ControlPlaneServicer_to_server
from controller.controller import KafkaController
from tests.controller.test_controller_liveness import _until
from traces.writer import TraceWriter
from zk.client import SessionEvent, ZkClient
from zk.znodes import (BrokerIdZNode, BrokerRegistration, LeaderIsrAndControllerEpoch, TopicPartitionStateZNode,
                       TopicZNode)

pytestmark = pytest.mark.processes

MULTI = 14  # ZooKeeper's opcode of a multi-op


class AnswerDroppingLink:
    """A TCP relay between the controller's ZooKeeper client and the server that reads ZooKeeper's length-prefixed
    frames. Once armed, it lets the next multi-op through to the server, drops the server's answer to it and cuts
    the connection, as a network failure at that moment would."""

    def __init__(self, server: str) -> None:
        host, port = server.split(":")
        self.upstream = (host, int(port))
        self.port = 0
        self.armed = False
        self.dropped = 0
        self._multi_xid: int | None = None
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        def cut() -> None:
            writer.transport.abort()
            up_writer.transport.abort()

        async def frames(source: asyncio.StreamReader, sink: asyncio.StreamWriter, inspect) -> None:
            first = True  # the connect request and its answer carry no xid
            try:
                while True:
                    header = await source.readexactly(4)
                    body = await source.readexactly(struct.unpack(">i", header)[0])
                    if not first and not inspect(body):
                        cut()
                        return
                    first = False
                    sink.write(header + body)
                    await sink.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                cut()

        def from_client(body: bytes) -> bool:
            xid, opcode = struct.unpack(">ii", body[:8])
            if self.armed and opcode == MULTI:
                self._multi_xid, self.armed = xid, False
            return True

        def from_server(body: bytes) -> bool:
            (xid,) = struct.unpack(">i", body[:4])
            if xid == self._multi_xid:
                self._multi_xid = None
                self.dropped += 1
                return False
            return True

        await asyncio.gather(frames(reader, up_writer, from_client), frames(up_reader, writer, from_server))


class RecordingBroker(ControlPlaneServicer):
    """Broker 1's cluster listener: records the LeaderAndIsr requests the controller sends it."""

    def __init__(self) -> None:
        self.leader_and_isr: list[pb.LeaderAndIsrRequest] = []

    async def LeaderAndIsr(self, request, context):
        self.leader_and_isr.append(request)
        return pb.LeaderAndIsrResponse()

    async def UpdateMetadata(self, request, context):
        return pb.UpdateMetadataResponse()

    async def StopReplica(self, request, context):
        return pb.StopReplicaResponse()


def test_a_leader_written_whose_answer_was_lost_is_still_announced_to_the_brokers(zk_connect, tmp_path):
    server, chroot = zk_connect.split("/", 1)

    async def body() -> tuple[RecordingBroker, list[dict], int]:
        broker = RecordingBroker()
        grpc_server = grpc.aio.server()
        add_ControlPlaneServicer_to_server(broker, grpc_server)
        cluster_port = grpc_server.add_insecure_port("127.0.0.1:0")
        await grpc_server.start()
        other = ZkClient(zk_connect, 6000)  # broker 2's session: its registration goes with it
        await other.start()
        await create_top_level_paths(other)
        for broker_id, zk_session in ((1, other), (2, other)):
            registration = BrokerRegistration(host="127.0.0.1", port=1, endpoints=[
                "PLAINTEXT://127.0.0.1:1", f"CLUSTER://127.0.0.1:{cluster_port if broker_id == 1 else 1}"])
            await zk_session.create(BrokerIdZNode.path(broker_id), BrokerIdZNode.encode(registration),
                                    ephemeral=broker_id == 2)
        await other.create(TopicZNode.path("ledger"), TopicZNode.encode({0: [2, 1]}))
        await other.create(TopicPartitionStateZNode.path("ledger", 0), TopicPartitionStateZNode.encode(
            LeaderIsrAndControllerEpoch(leader=2, leader_epoch=0, isr=[2, 1], controller_epoch=0)), makepath=True)
        link = AnswerDroppingLink(server)
        await link.start()
        zk = ZkClient(f"127.0.0.1:{link.port}/{chroot}", 6000)
        await zk.start()
        sessions = []
        zk.add_session_listener(sessions.append)
        trace_path = tmp_path / "trace.jsonl"
        trace = TraceWriter(trace_path, 1)
        controller = KafkaController(1, zk, trace, cluster_listener_name="CLUSTER")
        controller.start()
        try:
            await _until(lambda: controller.is_active and ("ledger", 0) in controller.ctx.leadership, 10,
                         "broker 1 to become controller and load the partition")
            link.armed = True
            await other.delete(BrokerIdZNode.path(2))  # broker 2 dies: broker 1 must lead
            await _until(lambda: link.dropped == 1, 10, "the answer to the election's write to be dropped")
            await _until(lambda: SessionEvent.RECONNECTED in sessions, 10, "the controller to reconnect")
            await _until(lambda: any(p.topic == "ledger" and p.leader == 1
                                     for r in broker.leader_and_isr for p in r.partition_states), 15,
                         "broker 1 to be told it leads ledger-0")
            data, stat = await other.get(TopicPartitionStateZNode.path("ledger", 0))
            return broker, json.loads(data), stat.version
        finally:
            await controller.stop()
            await zk.close()
            await other.close()
            link.close()
            await grpc_server.stop(None)
            trace.close()

    broker, state, version = asyncio.run(body())
    assert state["leader"] == 1 and state["leader_epoch"] == 1 and version == 1  # written once, not twice
    told = [p for r in broker.leader_and_isr for p in r.partition_states if p.topic == "ledger" and p.leader == 1]
    assert told[-1].leader_epoch == 1 and told[-1].zk_version == 1
