"""Controlled shutdown of a broker that is the last live member of a partition's ISR, with real broker processes and a
real ZooKeeper: as in Kafka 2.8, the controller's election fails and leaves the leader in place, the broker is
answered with the partition among the remaining ones, asks again controlled.shutdown.max.retries times and then stops
anyway; its death is handled as a failure (leader -1, the ISR keeps it)."""

import itertools
import os
import signal
import time

import pytest

from tests.harness import RunningCluster, wait_until, zk_call, znode_json
from traces import events as te
from zk.admin import create_topic
from zk.znodes import TopicPartitionStateZNode

pytestmark = [pytest.mark.processes, pytest.mark.slow]

RETRIES = 3
BACKOFF_MS = 1500  # long enough to read ZooKeeper between two attempts, short enough for a quick test


def state_znode(cluster: RunningCluster, topic: str) -> dict:
    return znode_json(cluster, TopicPartitionStateZNode.path(topic, 0))


def attempts(cluster: RunningCluster, broker: int) -> list[te.ControlledShutdownAttempt]:
    return [e for e in cluster.traces(broker) if isinstance(e, te.ControlledShutdownAttempt)]


def test_the_last_isr_member_keeps_its_leadership_through_every_attempt_then_stops_and_the_partition_goes_offline(
        cluster_factory):
    cluster = cluster_factory(overrides={"controlled.shutdown.max.retries": str(RETRIES),
                                         "controlled.shutdown.retry.backoff.ms": str(BACKOFF_MS)})
    controller = cluster.controller()
    alone, follower = [b.broker_id for b in cluster.spec.brokers if b.broker_id != controller]
    # "moved" has another ISR member to take over, "alone" will not
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, "alone", 1, 2, assignment={0: [alone, follower]}))
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, "moved", 1, 2, assignment={0: [alone, controller]}))
    wait_until(lambda: state_znode(cluster, "alone")["isr"] == [alone, follower]
               and state_znode(cluster, "moved")["isr"] == [alone, controller], 20, "both topics led with a full ISR")

    cluster.kill9(follower)
    # the controller takes the dead follower out of the ISR once its session expires (2 s)
    wait_until(lambda: state_znode(cluster, "alone")["isr"] == [alone], 20, f"the ISR of alone-0 to shrink to {alone}")
    before = state_znode(cluster, "alone")
    assert before["leader"] == alone

    began = time.monotonic()
    cluster.signal(alone, signal.SIGTERM)
    first = wait_until(lambda: attempts(cluster, alone), 20, f"broker {alone}'s first controlled shutdown attempt")[0]
    assert first.remaining == ["alone-0"] and first.error_code == 0 and first.controller == controller
    # while it retries, ZooKeeper still names it leader of the partition nobody else can lead
    during = state_znode(cluster, "alone")
    assert alone in {b.broker_id for b in cluster.state(topics=[]).brokers}, "read while the broker was registered"
    assert (during["leader"], during["isr"], during["leader_epoch"]) == (alone, [alone], before["leader_epoch"])
    # ... and the partition that had another ISR member moved at the first attempt
    assert state_znode(cluster, "moved")["leader"] == controller

    wait_until(lambda: cluster.pid(alone) is None, 30, f"broker {alone} to stop after its last attempt")
    stopped_s = time.monotonic() - began
    tried = attempts(cluster, alone)
    assert [a.attempt for a in tried] == list(range(1, RETRIES + 1))
    assert all(a.remaining == ["alone-0"] and a.max_attempts == RETRIES and a.backoff_ms == BACKOFF_MS for a in tried)
    # Kafka waits the backoff after every failed attempt, the last one too
    assert stopped_s >= RETRIES * BACKOFF_MS / 1000
    gaps = [(b.mono_ns - a.mono_ns) / 1e9 for a, b in itertools.pairwise(tried)]
    assert all(gap >= BACKOFF_MS / 1000 * 0.9 for gap in gaps), gaps
    steps = [e.phase for e in cluster.traces(alone) if isinstance(e, te.ControlledShutdownStep)]
    assert steps == ["requested"] * RETRIES + ["failed"]
    assert [e.clean for e in cluster.traces(alone) if isinstance(e, te.BrokerStopped)] == [False]

    handled = [e for e in cluster.traces(controller)
               if isinstance(e, te.ControlledShutdownStep) and e.phase == "handled"]
    assert [e.remaining for e in handled] == [["alone-0"]] * RETRIES
    # the controller never wrote a controlled-shutdown election for it: no leader -1 while the broker lived
    assert not [e for e in cluster.traces(controller) if isinstance(e, te.LeaderElected) and e.topic == "alone"
                and e.election == "controlled_shutdown"]

    # once the broker is gone, the controller handles it as failed: no live ISR member, unclean election off
    after = wait_until(lambda: (s := state_znode(cluster, "alone"))["leader"] == -1 and s, 20,
                       "the controller to take alone-0 offline")
    assert after["isr"] == [alone] and after["leader_epoch"] > before["leader_epoch"]
    offline = [e for e in cluster.traces(controller) if isinstance(e, te.LeaderElected) and e.topic == "alone"
               and e.leader == -1]
    assert offline and all(e.election in ("offline", "isr_removal") for e in offline)


ROUNDS = 3
EXIT_BOUND_S = 30.0  # half of the 60 s once seen; a healthy controlled shutdown here takes about a second


def test_controlled_shutdowns_of_leaders_under_a_running_producer_end_in_seconds_with_one_answered_attempt(
        cluster_factory):
    # The 60-second wait once seen after a controlled shutdown: this drives the same path (SIGTERM of the leader
    # under acks=all traffic, the controller among the victims as `kafkasim down` stops it last, restart, full ISR)
    # on a machine shared with other test runs, with a deadline on each step instead of a sleep.
    from cluster.scenarios.producers import BackgroundProducer

    cluster = cluster_factory()
    zk_call(cluster.zk_connect, lambda zk: create_topic(zk, "busy", 3, 3))
    wait_until(lambda: all(len(p.isr) == 3 and p.leader >= 0 for p in cluster.state(["busy"]).partitions), 20,
               "busy's partitions led with a full ISR")
    producer = BackgroundProducer(cluster.spec.bootstrap_servers, "busy", "load", acks="all", interval_s=0.01)
    try:
        wait_until(lambda: producer.acknowledged_count() >= 50, 20, "the producer's first acknowledgements")
        for round_ in range(ROUNDS):
            state = cluster.state(["busy"])
            # the last round stops the controller, as `kafkasim down` does after the others
            victim = state.controller_id if round_ == ROUNDS - 1 else state.partition("busy", 0).leader
            began, signalled_ms = time.monotonic(), time.time() * 1000
            cluster.signal(victim, signal.SIGTERM)
            wait_until(lambda v=victim: cluster.pid(v) is None, EXIT_BOUND_S,
                       f"broker {victim} to exit after SIGTERM (round {round_ + 1})")
            took_s = time.monotonic() - began
            tried = [a for a in attempts(cluster, victim) if a.ts_ms >= signalled_ms]
            assert [(a.error_code, a.remaining) for a in tried] == [(0, [])], (round_, took_s, tried)
            acked = producer.acknowledged_count()
            wait_until(lambda a=acked: producer.acknowledged_count() >= a + 50, 20,
                       f"acknowledgements after broker {victim}'s controlled shutdown (round {round_ + 1})")
            cluster.start(victim)
            wait_until(lambda: all(len(p.isr) == 3 for p in cluster.state(["busy"]).partitions), 30,
                       f"broker {victim} back in every ISR (round {round_ + 1})")
            print(f"round {round_ + 1}: broker {victim} exited {took_s:.1f} s after SIGTERM; load average "
                  f"{os.getloadavg()[0]:.1f}")
    finally:
        sent = producer.stop()
    assert not sent.errors, sent.errors
