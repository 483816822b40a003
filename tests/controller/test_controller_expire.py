"""Session expiry clears the controller's queue as Kafka's ControllerEventManager.clearAndPut(Expire) does: the
controller resigns before it decides anything more, and callers waiting on a dropped event are told the controller
moved."""

import asyncio

from kio.schema.errors import ErrorCode

from controller import events as ev
from controller import preferred_election as pe
from controller.controller import KafkaController
from controller.zk_writes import ControllerMovedError
from traces.writer import TraceWriter


def test_expiry_drops_the_queue_answers_the_waiting_callers_and_keeps_the_shutdown(tmp_path):
    async def body():
        controller = KafkaController(1, None, TraceWriter(tmp_path / "t.jsonl", 1, enabled=False),
                                     cluster_listener_name="CLUSTER")
        loop = asyncio.get_running_loop()
        shutdown_request = ev.ControlledShutdown(2, 7, loop.create_future())
        election = ev.ReplicaLeaderElection([("t", 0)], pe.ElectionType.PREFERRED, loop.create_future())
        reassignment = ev.ApiPartitionReassignment({("t", 0): [1, 2]}, loop.create_future())
        for event in (ev.TopicChange(), shutdown_request, election, reassignment, ev.Shutdown(), ev.BrokerChange()):
            controller.put(event)
        controller.expire()
        queued = [controller._queue.get_nowait() for _ in range(controller._queue.qsize())]
        return queued, shutdown_request.reply.result(), election.reply.result(), reassignment.reply.exception()

    queued, shutdown_answer, election_answer, reassignment_error = asyncio.run(body())
    assert queued == [ev.Expire(), ev.Shutdown()]
    assert shutdown_answer == (ErrorCode.not_controller.value, [])
    assert election_answer == {("t", 0): pe.ElectionResult(ErrorCode.not_controller)}
    assert isinstance(reassignment_error, ControllerMovedError)
