"""Controller election, failover and fencing with real broker processes and a real ZooKeeper."""

import asyncio
import json
import os
import signal
import time

import grpc
import pytest
from kio.schema.errors import ErrorCode

from cluster.disk import broker_log_dir
from controller.controller import CONTROLLED_SHUTDOWN_PROPAGATION_S
from zk.admin import create_topic
from clusterplane import cluster_pb2 as pb
from clusterplane.cluster_pb2_grpc import AdminStub, ControlPlaneStub
from tests.harness import RunningCluster, own_cluster, wait_until, zk_call, znode_json
from traces import events as te

pytestmark = [pytest.mark.processes, pytest.mark.slow]
SESSION_S = 2.0  # the classroom profile's zookeeper.session.timeout.ms


def make_topic(cluster: RunningCluster, name: str, partitions: int, rf: int, config=None) -> None:
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, name, partitions, rf, config))
    wait_until(lambda: all(p.leader >= 0 for p in cluster.state([name]).partitions)
               and len(cluster.state([name]).partitions) == partitions, 15, f"{name} to get leaders")


def grpc_call(cluster: RunningCluster, broker_id: int, fn):
    port = cluster.spec.broker(broker_id).cluster_port

    async def run():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return await fn(channel)
    return asyncio.run(run())


def test_one_controller_is_elected_and_every_znode_is_in_kafkas_format(cluster):
    state = cluster.state()
    assert state.controller_id in {1, 2, 3} and state.controller_epoch == 1
    controller = znode_json(cluster, "/controller")
    assert set(controller) == {"version", "brokerid", "timestamp"} and controller["brokerid"] == state.controller_id
    assert cluster.raw("/controller_epoch")[0] == b"1"
    cluster_id = znode_json(cluster, "/cluster/id")
    assert cluster_id["version"] == "1" and len(cluster_id["id"]) == 22
    for broker in cluster.spec.brokers:
        _, stat = cluster.raw(f"/brokers/ids/{broker.broker_id}")
        registration = znode_json(cluster, f"/brokers/ids/{broker.broker_id}")
        assert registration["version"] == 5 and registration["port"] == broker.client_port
        assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.client_port}",
                                             f"CLUSTER://127.0.0.1:{broker.cluster_port}"]
        assert stat.version == 1  # created and set in one multi-op, as Kafka does
        # traces are written by a background thread: wait for the line rather than race it
        registered = wait_until(lambda b=broker.broker_id: [e for e in cluster.traces(b)
                                                            if isinstance(e, te.BrokerRegistered)], 10, "trace")
        assert registered[-1].broker_epoch == stat.czxid  # the broker epoch is the czxid
    elected = wait_until(lambda: [e for e in cluster.all_traces() if isinstance(e, te.ControllerElected)], 10,
                         "the election trace")
    assert [e.broker_id for e in elected] == [state.controller_id]

    make_topic(cluster, "fmt", 2, 3)
    topic = znode_json(cluster, "/brokers/topics/fmt")
    assert topic["version"] == 2 and set(topic["partitions"]) == {"0", "1"}
    assert topic["adding_replicas"] == {} and topic["removing_replicas"] == {}
    part = znode_json(cluster, "/brokers/topics/fmt/partitions/0/state")
    assert set(part) == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
    assert part["leader"] == topic["partitions"]["0"][0] and part["leader_epoch"] == 0
    assert part["isr"] == topic["partitions"]["0"] and part["controller_epoch"] == 1
    assert znode_json(cluster, "/config/topics/fmt") == {"version": 1, "config": {}}


def test_controller_failover_after_kill9(cluster):
    old = cluster.controller()
    cluster.kill9(old)
    started = time.monotonic()
    state = wait_until(lambda: (s := cluster.state(topics=[])).controller_id not in (-1, old) and s,
                       SESSION_S + 15, "a new controller")
    assert state.controller_epoch == 2
    assert old not in {b.broker_id for b in state.brokers}
    elected = wait_until(lambda: [e for e in cluster.traces(state.controller_id)
                                  if isinstance(e, te.ControllerElected)], 10, "the election trace")
    assert elected[-1].controller_epoch == 2
    print(f"new controller after {time.monotonic() - started:.2f} s")


def test_leader_moves_to_the_next_isr_member_after_kill9(cluster):
    make_topic(cluster, "orders", 3, 3)
    controller = cluster.controller()
    before = cluster.state(["orders"])
    victim_partition = next(p for p in before.partitions if p.leader != controller)
    victim = victim_partition.leader
    cluster.kill9(victim)
    after = wait_until(lambda: (s := cluster.state(["orders"])).partition("orders", victim_partition.partition)
                       .leader not in (victim, -1) and all(victim not in p.isr for p in s.partitions) and s,
                       SESSION_S + 15, "the leader to move and the ISRs to shrink")
    for old_view in before.partitions:
        new_view = after.partition("orders", old_view.partition)
        assert victim not in new_view.isr
        if old_view.leader == victim:
            expected = next(r for r in old_view.replicas if r != victim and r in old_view.isr)
            assert new_view.leader == expected
        else:
            assert new_view.leader == old_view.leader
        assert new_view.leader_epoch == old_view.leader_epoch + 1
    # every live broker was told: its own replicas' roles follow ZooKeeper
    for broker in after.brokers:
        def mismatches(broker_id: int = broker.broker_id) -> list[tuple[str, int, int, int]]:
            # re-asked on every poll: the broker may apply the LeaderAndIsr just after ZooKeeper shows it
            view = grpc_call(cluster, broker_id,
                             lambda ch: AdminStub(ch).DescribeBroker(pb.DescribeBrokerRequest(), timeout=5))
            assert view.replicas, f"broker {broker_id} reports no replicas"
            return [(r.topic, r.partition, r.leader, after.partition(r.topic, r.partition).leader)
                    for r in view.replicas if r.leader != after.partition(r.topic, r.partition).leader]

        wait_until(lambda m=mismatches: not m(), 10, f"broker {broker.broker_id}'s view to match ZooKeeper")


def test_a_paused_controller_is_fenced_and_resigns(cluster):
    make_topic(cluster, "paused", 3, 3)
    old = cluster.controller()
    cluster.signal(old, signal.SIGSTOP)
    try:
        state = wait_until(lambda: (s := cluster.state(["paused"])).controller_id not in (-1, old)
                           and all(p.leader not in (-1, old) and old not in p.isr for p in s.partitions) and s,
                           SESSION_S + 20, "a new controller and new leaders while the old one is paused")
    finally:
        cluster.signal(old, signal.SIGCONT)
    assert state.controller_epoch == 2
    assert all(p.controller_epoch == 2 for p in state.partitions if old in p.replicas and p.leader_epoch > 0)
    wait_until(lambda: any(isinstance(e, te.ControllerResigned) for e in cluster.traces(old)), 20,
               "the old controller to resign")
    wait_until(lambda: len([e for e in cluster.traces(old) if isinstance(e, te.BrokerRegistered)]) == 2, 20,
               "the old controller to re-register")
    wait_until(lambda: old in {b.broker_id for b in cluster.state(topics=[]).brokers}, 10, "re-registration")
    after = cluster.state(["paused"])
    assert after.controller_id == state.controller_id and after.controller_epoch == 2
    assert cluster.raw("/controller_epoch")[0] == b"2"
    for p in state.partitions:
        q = after.partition("paused", p.partition)
        # Leadership is what the new controller decided; the only change since is the leader itself
        # adding the resumed broker back to the ISR once it caught up (same leader epoch, ISR grows).
        assert (q.leader, q.leader_epoch) == (p.leader, p.leader_epoch)
        assert set(p.isr) <= set(q.isr) and q.zk_version >= p.zk_version
    # nothing the deposed controller decided reached ZooKeeper after it was paused
    resigned = next(e for e in cluster.traces(old) if isinstance(e, te.ControllerResigned))
    late = [e for e in cluster.traces(old) if isinstance(e, te.LeaderElected) and e.ts_ms > resigned.ts_ms]
    assert late == []


def test_brokers_refuse_control_requests_from_a_deposed_controller(cluster):
    make_topic(cluster, "fenced", 1, 3)
    broker = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
    partition = cluster.state(["fenced"]).partition("fenced", 0)
    stale = pb.LeaderAndIsrRequest(controller_id=9, controller_epoch=0, broker_epoch=-1, partition_states=[
        pb.PartitionState(topic="fenced", partition=0, controller_epoch=0, leader=broker, leader_epoch=99,
                          isr=[broker], replicas=partition.replicas)])
    response = grpc_call(cluster, broker, lambda ch: ControlPlaneStub(ch).LeaderAndIsr(stale, timeout=5))
    assert response.error_code == ErrorCode.stale_controller_epoch.value
    view = grpc_call(cluster, broker, lambda ch: AdminStub(ch).DescribeBroker(pb.DescribeBrokerRequest(), timeout=5))
    mine = next(r for r in view.replicas if r.topic == "fenced")
    assert mine.leader == partition.leader and mine.leader_epoch == partition.leader_epoch

    old_epoch = pb.LeaderAndIsrRequest(controller_id=9, controller_epoch=1, broker_epoch=view.broker_epoch - 1)
    response = grpc_call(cluster, broker, lambda ch: ControlPlaneStub(ch).LeaderAndIsr(old_epoch, timeout=5))
    assert response.error_code == ErrorCode.stale_broker_epoch.value
    wait_until(lambda: {e.error_code for e in cluster.traces(broker)
                        if isinstance(e, te.ControlRequestApplied) and e.error_code} == {11, 77}, 10,
               "both refusals in the trace")


def test_controlled_shutdown_moves_leaders_before_the_broker_exits(cluster):
    make_topic(cluster, "cs", 3, 3)
    controller = cluster.controller()
    leaving = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != controller)
    led = [p.partition for p in cluster.state(["cs"]).partitions if p.leader == leaving]
    assert led, "the assignment gives every broker a leadership"
    cluster.signal(leaving, signal.SIGTERM)
    wait_until(lambda: cluster.pid(leaving) is None, 30, "the broker to exit")
    after = cluster.state(["cs"])
    assert all(p.leader not in (-1, leaving) and leaving not in p.isr for p in after.partitions)
    steps = [e.phase for e in cluster.traces(leaving) if isinstance(e, te.ControlledShutdownStep)]
    assert steps == ["requested", "succeeded"]
    stopped = [e for e in cluster.traces(leaving) if isinstance(e, te.BrokerStopped)]
    assert stopped and stopped[0].clean
    moved = wait_until(lambda: [e for e in cluster.traces(controller)
                                if isinstance(e, te.LeaderElected) and e.election == "controlled_shutdown"], 10,
                       "the controller's election traces")
    assert sorted(e.partition for e in moved) == sorted(led)
    succeeded = next(e for e in cluster.traces(leaving) if getattr(e, "phase", "") == "succeeded")
    assert all(e.ts_ms <= succeeded.ts_ms for e in moved)


def test_a_controlled_shutdown_waiting_on_a_silent_broker_does_not_hold_back_a_kills_election(cluster):
    # The controller waits (bounded) for the other brokers to apply a controlled shutdown's moves before it
    # answers. A broker that never answers must cost only the stopping broker that time, not the cluster:
    # the failure of another broker meanwhile is elected at once.
    make_topic(cluster, "cs-live", 3, 3)
    controller = cluster.controller()
    leaving, silent = [b.broker_id for b in cluster.spec.brokers if b.broker_id != controller]
    led_by_silent = {p.partition for p in cluster.state(["cs-live"]).partitions if p.leader == silent}
    assert led_by_silent, "the assignment gives every broker a leadership"
    cluster.signal(silent, signal.SIGSTOP)  # it will never answer the LeaderAndIsr of the shutdown
    try:
        cluster.signal(leaving, signal.SIGTERM)
        handled = wait_until(lambda: [e for e in cluster.traces(controller)
                                      if isinstance(e, te.ControlledShutdownStep) and e.phase == "handled"], 15,
                             "the controller to handle the controlled shutdown")
    finally:
        cluster.signal(silent, signal.SIGKILL)
    elected = wait_until(lambda: [e for e in cluster.traces(controller)
                                  if isinstance(e, te.LeaderElected) and e.topic == "cs-live"
                                  and e.election == "offline" and e.partition in led_by_silent], SESSION_S + 20,
                         "the killed broker's partitions to be elected")
    wait_until(lambda: cluster.pid(leaving) is None, 30, "the stopping broker to exit")
    succeeded = [e for e in cluster.traces(leaving)
                 if isinstance(e, te.ControlledShutdownStep) and e.phase == "succeeded"]
    assert succeeded, "the stopping broker got its answer"
    # Before the fix the election waited in the event queue behind the shutdown's 10 s wait for the silent
    # broker's answer. And that wait ends when the silent broker is gone: its unanswered request is given up
    # with it, instead of holding the stopping broker for the whole bound.
    bound_ms = CONTROLLED_SHUTDOWN_PROPAGATION_S * 1000
    assert elected[0].ts_ms < handled[0].ts_ms + bound_ms
    assert succeeded[0].ts_ms < handled[0].ts_ms + bound_ms
    wait_until(lambda: all(p.leader == controller for p in cluster.state(["cs-live"]).partitions), 15,
               "the one broker left to lead every partition")


def test_a_broker_whose_session_expired_registers_again_with_a_new_epoch(cluster):
    broker = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
    _, stat = cluster.raw(f"/brokers/ids/{broker}")
    cluster.signal(broker, signal.SIGSTOP)
    try:
        wait_until(lambda: broker not in {b.broker_id for b in cluster.state(topics=[]).brokers},
                   SESSION_S + 20, "the paused broker's registration to expire")
    finally:
        cluster.signal(broker, signal.SIGCONT)
    again = wait_until(lambda: next((b for b in cluster.state(topics=[]).brokers if b.broker_id == broker), None),
                       20, "the broker to register again")
    assert again.broker_epoch > stat.czxid
    wait_until(lambda: {"expired", "new_session"} <= {e.state for e in cluster.traces(broker)
                                                      if isinstance(e, te.SessionStateChanged)}, 10,
               "the session expiry and the new session in the broker's trace")


def test_after_the_old_controllers_session_expired_killing_the_new_controller_that_leads_still_fails_over(cluster):
    """The sequence of a chaos run that once left the cluster without a controller: the controller's session
    expires (it is paused past the session timeout), another broker takes over, and that one, also a
    partition's leader, is killed with -9. A controller and a leader must follow every time."""
    make_topic(cluster, "relay", 3, 3)
    first = cluster.controller()
    cluster.signal(first, signal.SIGSTOP)
    try:
        wait_until(lambda: first not in {b.broker_id for b in cluster.state(topics=[]).brokers},
                   SESSION_S + 20, "the paused controller's session to expire")
        second = wait_until(lambda: (c := cluster.controller()) not in (-1, first) and c, 20, "a new controller")
    finally:
        cluster.signal(first, signal.SIGCONT)
    wait_until(lambda: first in {b.broker_id for b in cluster.state(topics=[]).brokers}, 20,
               "the expired broker to register again")
    led = wait_until(lambda: [p.partition for p in cluster.state(["relay"]).partitions if p.leader == second], 20,
                     f"a partition led by broker {second}")
    cluster.kill9(second)
    state = wait_until(lambda: (s := cluster.state(["relay"])).controller_id not in (-1, second)
                       and all(s.partition("relay", p).leader not in (-1, second) for p in led) and s,
                       SESSION_S + 20, f"a controller and new leaders of {led} after killing broker {second}")
    assert state.controller_epoch == 3
    # both survivors still act on the controller's requests: each leads or follows with the new epoch
    survivors = {b.broker_id for b in cluster.spec.brokers} - {second}
    wait_until(lambda: all(set(p.isr) >= survivors for p in cluster.state(["relay"]).partitions), 30,
               f"brokers {sorted(survivors)} in every ISR")


def test_a_leader_and_isr_whose_caller_went_away_is_still_applied_to_every_partition(tmp_path):
    # gRPC cancels a handler at its next await when the caller goes away (the controller killed, resigned, or
    # its deadline passed). The broker records the request's states before its first await, so a half-applied
    # request would never be repaired: the controller's repeat of the same epochs is refused as stale. ZooKeeper
    # paused holds the apply at its first await (the read of the new topic's config) while the call is cancelled.
    with own_cluster(tmp_path / "cluster", overrides={"zookeeper.session.timeout.ms": "15000"}) as cluster:
        target = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
        controller_epoch = int(cluster.raw("/controller_epoch")[0])
        broker_epoch = cluster.raw(f"/brokers/ids/{target}")[1].czxid
        request = pb.LeaderAndIsrRequest(
            controller_id=cluster.controller(), controller_epoch=controller_epoch, broker_epoch=broker_epoch,
            partition_states=[pb.PartitionState(topic="orphan", partition=p, controller_epoch=controller_epoch,
                                                leader=target, leader_epoch=0, isr=[target], zk_version=0,
                                                replicas=[target], is_new=True) for p in range(30)])
        zookeeper = cluster.layout.zookeeper_pid().read()
        port = cluster.spec.broker(target).cluster_port

        def received() -> bool:
            return any(isinstance(e, te.ControlRequestReceived) and e.partitions == 30 for e in cluster.traces(target))

        async def send_and_walk_away() -> None:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = asyncio.ensure_future(ControlPlaneStub(channel).LeaderAndIsr(request, timeout=30))
                deadline = time.monotonic() + 10
                while not received():
                    assert time.monotonic() < deadline, "the broker never received the request"
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.2)  # the handler is waiting on ZooKeeper by now
                call.cancel()

        os.kill(zookeeper, signal.SIGSTOP)
        try:
            asyncio.run(send_and_walk_away())
        finally:
            os.kill(zookeeper, signal.SIGCONT)
        log_dir = broker_log_dir(cluster.spec, target, cluster.layout)
        wait_until(lambda: all((log_dir / f"orphan-{p}").is_dir() for p in range(30)), 20,
                   "every partition of the cancelled request to get its log")


def test_a_leader_and_isr_that_could_not_be_applied_is_taken_when_the_controller_sends_it_again(cluster):
    # A bounced broker's config read for a new topic failed (its ZooKeeper session lost meanwhile); the states were
    # already recorded, so the controller's repeat (sent when the broker registered again) was refused as stale and
    # the broker stayed out of every ISR. Here the read fails on a config ZooKeeper holds that no log can take.
    target = next(b.broker_id for b in cluster.spec.brokers if b.broker_id != cluster.controller())
    config_path = "/config/topics/orphan"
    zk_call(cluster.zk_connect, lambda zk: zk.create(config_path, json.dumps(
        {"version": 1, "config": {"segment.bytes": "not-a-number"}}).encode(), makepath=True))

    def leader_and_isr() -> pb.LeaderAndIsrRequest:
        controller_epoch = int(cluster.raw("/controller_epoch")[0])
        return pb.LeaderAndIsrRequest(
            controller_id=cluster.controller(), controller_epoch=controller_epoch,
            broker_epoch=cluster.raw(f"/brokers/ids/{target}")[1].czxid,
            partition_states=[pb.PartitionState(topic="orphan", partition=p, controller_epoch=controller_epoch,
                                                leader=target, leader_epoch=0, isr=[target], zk_version=0,
                                                replicas=[target], is_new=True) for p in range(25)])

    request = leader_and_isr()
    with pytest.raises(grpc.aio.AioRpcError) as failed:  # the controller's sender tries a failed request again
        grpc_call(cluster, target, lambda ch: ControlPlaneStub(ch).LeaderAndIsr(request, timeout=10))
    assert failed.value.code() == grpc.StatusCode.UNKNOWN
    log_dir = broker_log_dir(cluster.spec, target, cluster.layout)
    assert not list(log_dir.glob("orphan-*"))
    zk_call(cluster.zk_connect, lambda zk: zk.set(config_path, json.dumps(
        {"version": 1, "config": {"segment.bytes": "1048576"}}).encode()))
    request = leader_and_isr()
    again = grpc_call(cluster, target, lambda ch: ControlPlaneStub(ch).LeaderAndIsr(request, timeout=10))
    assert {e.error_code for e in again.partition_errors} == {0}
    assert all((log_dir / f"orphan-{p}").is_dir() for p in range(25))
