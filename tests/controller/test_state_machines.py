"""The controller's partition and replica state machines, without ZooKeeper: a context in, the writes
and requests they decide out."""

import pytest

from controller import partition_state_machine as psm
from controller import replica_state_machine as rsm
from controller.channel import ControlRequestBatch
from controller.context import ControllerContext, PartitionLeadership
from controller.state_change import ControllerMovedError
from controller.topic_deletion import decide_topic_deletion
from zk.znodes import NO_LEADER, BrokerRegistration, LeaderIsrAndControllerEpoch

EPOCH = 7


def context(live=(1, 2, 3), assignments=None, states=None, configs=None) -> ControllerContext:
    """``states``: {(topic, partition): (leader, isr, leader_epoch)}; each at zkVersion 4."""
    ctx = ControllerContext(epoch=EPOCH, epoch_zk_version=EPOCH)
    for b in live:
        ctx.live_brokers[b] = BrokerRegistration(endpoints=[f"CLUSTER://127.0.0.1:{9190 + b}"])
        ctx.broker_epochs[b] = 100 + b
    ctx.assignments = assignments or {"t": {0: [1, 2, 3]}}
    ctx.topic_configs = configs or {}
    for tp, (leader, isr, leader_epoch) in (states or {}).items():
        ctx.leadership[tp] = PartitionLeadership(
            LeaderIsrAndControllerEpoch(leader=leader, leader_epoch=leader_epoch, isr=list(isr),
                                        controller_epoch=EPOCH - 1), zk_version=4)
    return ctx


def kill(ctx: ControllerContext, *brokers: int) -> None:
    for b in brokers:
        del ctx.live_brokers[b]
        del ctx.broker_epochs[b]


# --- partition states ----------------------------------------------------------------------------------

def test_partition_states_follow_kafkas_names():
    ctx = context(assignments={"t": {0: [1, 2], 1: [1, 2], 2: [3]}},
                  states={("t", 0): (1, [1, 2], 0), ("t", 2): (3, [3], 0)})
    kill(ctx, 3)
    assert psm.partition_state(ctx, ("t", 0)) is psm.PartitionState.ONLINE
    assert psm.partition_state(ctx, ("t", 1)) is psm.PartitionState.NEW
    assert psm.partition_state(ctx, ("t", 2)) is psm.PartitionState.OFFLINE
    assert psm.partition_state(ctx, ("t", 9)) is psm.PartitionState.NON_EXISTENT


def test_new_partition_leads_on_first_live_replica_with_live_isr_and_epoch_zero():
    ctx = context(assignments={"t": {0: [3, 1, 2]}})
    kill(ctx, 3)
    changes = psm.trigger_online_partitions(ctx, unclean_default=False)
    (write,) = changes.writes
    assert write.expected_zk_version is None and write.is_new
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (1, [1, 2], 0)
    assert write.state.controller_epoch == EPOCH and write.election == "initial"
    assert write.leader_and_isr_to == (1, 2)


def test_new_partition_without_a_live_replica_stays_new():
    ctx = context(live=(1,), assignments={"t": {0: [2, 3]}})
    changes = psm.trigger_online_partitions(ctx, unclean_default=False)
    assert changes.writes == [] and changes.unchanged == [("t", 0)]


# --- offline election ----------------------------------------------------------------------------------

def test_offline_election_after_leader_death_picks_first_live_isr_member_and_bumps_epoch():
    ctx = context(assignments={"t": {0: [1, 2, 3]}}, states={("t", 0): (1, [1, 2, 3], 5)})
    kill(ctx, 1)
    changes = psm.elect(ctx, ctx.partitions_led_by({1}), psm.OFFLINE)
    (write,) = changes.writes
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (2, [2, 3], 6)
    assert write.expected_zk_version == 4 and write.previous_leader == 1 and write.election == "offline"
    assert write.leader_and_isr_to == (2, 3)


def test_one_step_covers_every_partition_and_batches_one_request_per_broker():
    assignments = {"t": {p: [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3] for p in range(30)}}
    states = {("t", p): (reps[0], reps, 0) for p, reps in assignments["t"].items()}
    ctx = context(assignments=assignments, states=states)
    kill(ctx, 1)
    changes = psm.elect(ctx, ctx.partitions_led_by({1}), psm.OFFLINE)
    assert len(changes.writes) == 10 and all(w.state.leader != 1 for w in changes.writes)

    sent = []

    class Recorder:
        def send(self, broker, method, request):
            sent.append((broker, method, len(request.partition_states) if hasattr(request, "partition_states")
                         else len(request.partitions)))

    batch = ControlRequestBatch(2, ctx, Recorder())
    for write in changes.writes:
        ctx.leadership[write.tp] = PartitionLeadership(write.state, 5)
        batch.add_leader_and_isr(write.leader_and_isr_to, write.tp)
    batch.send()
    leader_and_isr = [s for s in sent if s[1] == "LeaderAndIsr"]
    assert sorted(b for b, _, _ in leader_and_isr) == [2, 3]  # one request per live broker
    assert all(n == 10 for _, _, n in leader_and_isr)
    assert sorted(b for b, m, _ in sent if m == "UpdateMetadata") == [2, 3]


def test_offline_partition_that_stays_offline_writes_nothing():
    ctx = context(states={("t", 0): (NO_LEADER, [1], 3)})
    kill(ctx, 1)
    changes = psm.elect(ctx, [("t", 0)], psm.OFFLINE)
    assert changes.writes == [] and changes.unchanged == [("t", 0)]


def test_leader_dies_with_no_other_isr_member_goes_leaderless_and_keeps_its_isr():
    ctx = context(states={("t", 0): (1, [1], 3)})
    kill(ctx, 1)
    (write,) = psm.elect(ctx, [("t", 0)], psm.OFFLINE).writes
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (NO_LEADER, [1], 4)


def test_unclean_election_only_where_the_topic_or_the_broker_default_allows_it():
    states = {("t", 0): (NO_LEADER, [1], 3)}
    ctx = context(states=states)
    kill(ctx, 1)
    assert psm.elect(ctx, [("t", 0)], psm.OFFLINE, unclean_default=False).writes == []
    (write,) = psm.elect(ctx, [("t", 0)], psm.OFFLINE, unclean_default=True).writes
    assert (write.state.leader, write.state.isr, write.election) == (2, [2], "unclean")

    topic_on = context(states=states, configs={"t": {"unclean.leader.election.enable": "true"}})
    kill(topic_on, 1)
    (write,) = psm.elect(topic_on, [("t", 0)], psm.OFFLINE, unclean_default=False).writes
    assert write.election == "unclean"
    topic_off = context(states=states, configs={"t": {"unclean.leader.election.enable": "false"}})
    kill(topic_off, 1)
    assert psm.elect(topic_off, [("t", 0)], psm.OFFLINE, unclean_default=True).writes == []


def test_an_election_that_changes_nothing_writes_nothing():
    ctx = context(states={("t", 0): (1, [1, 2, 3], 0)})
    assert psm.elect(ctx, [("t", 0)], psm.OFFLINE).writes == []


def test_a_state_decided_by_a_newer_controller_means_this_one_was_deposed():
    ctx = context(states={("t", 0): (1, [1, 2, 3], 0)})
    ctx.leadership[("t", 0)].state = ctx.leadership[("t", 0)].state.with_changes(controller_epoch=EPOCH + 1)
    kill(ctx, 1)
    with pytest.raises(ControllerMovedError):
        psm.elect(ctx, [("t", 0)], psm.OFFLINE)
    with pytest.raises(ControllerMovedError):
        rsm.to_offline(ctx, 1)


def test_known_partition_without_leader_is_elected_not_created_again():
    ctx = context(states={("t", 0): (NO_LEADER, [2], 1)})
    (write,) = psm.trigger_online_partitions(ctx, unclean_default=False).writes
    assert write.expected_zk_version == 4 and write.state.leader == 2 and not write.is_new


# --- controlled shutdown -------------------------------------------------------------------------------

def test_controlled_shutdown_moves_leadership_and_stops_the_followers():
    assignments = {"t": {0: [1, 2, 3], 1: [2, 1, 3], 2: [1]}, "gone": {0: [1, 2]}}
    states = {("t", 0): (1, [1, 2, 3], 2), ("t", 1): (2, [2, 1, 3], 4), ("t", 2): (1, [1], 0),
              ("gone", 0): (1, [1, 2], 0)}
    ctx = context(assignments=assignments, states=states)
    ctx.topics_to_delete = {"gone"}
    ctx.shutting_down.add(1)
    replicated = psm.partitions_to_move_for_shutdown(ctx, 1)
    assert replicated == [("t", 0), ("t", 1)]  # single-replica and deleting topics stay

    (write,) = psm.elect(ctx, rsm.still_led_by(ctx, 1, replicated), psm.CONTROLLED_SHUTDOWN).writes
    assert (write.state.leader, write.state.isr, write.state.leader_epoch) == (2, [2, 3], 3)
    assert write.election == "controlled_shutdown" and write.leader_and_isr_to == (1, 2, 3)
    ctx.leadership[write.tp] = PartitionLeadership(write.state, 5)

    followers = rsm.shutdown_followers(ctx, 1, replicated)
    assert [(s.broker, s.tp, s.delete) for s in followers.stop_replicas] == [(1, ("t", 0), False), (1, ("t", 1), False)]
    (isr_write,) = followers.writes  # t-0 already lost broker 1 from its ISR in the election
    assert isr_write.tp == ("t", 1) and isr_write.state.isr == [2, 3] and isr_write.state.leader == 2
    assert isr_write.leader_and_isr_to == (2, 3)
    ctx.leadership[isr_write.tp] = PartitionLeadership(isr_write.state, 5)
    assert rsm.still_led_by(ctx, 1, replicated) == []


def test_controlled_shutdown_of_the_last_isr_member_fails_its_election_and_leaves_the_leader_in_place():
    # Kafka 2.8: Election.leaderForControlledShutdown finds no replica alive, in the ISR and not shutting down, so
    # doElectLeaderForPartitions counts a failed election and writes nothing; the partition is among the remaining
    # ones (partitionLeadersOnBroker) the broker is answered with.
    assignments = {"t": {0: [1, 2, 3], 1: [2, 1, 3]}}
    states = {("t", 0): (1, [1], 5), ("t", 1): (2, [2, 1, 3], 4)}
    ctx = context(assignments=assignments, states=states)
    kill(ctx, 3)
    ctx.shutting_down.add(1)
    replicated = psm.partitions_to_move_for_shutdown(ctx, 1)
    assert replicated == [("t", 0), ("t", 1)]

    led = rsm.still_led_by(ctx, 1, replicated)
    changes = psm.elect(ctx, led, psm.CONTROLLED_SHUTDOWN)
    assert changes.writes == [] and changes.leader_and_isr == [] and changes.unchanged == [("t", 0)]
    followers = rsm.shutdown_followers(ctx, 1, replicated)
    assert [s.tp for s in followers.stop_replicas] == [("t", 1)]  # the partition it still leads is not stopped
    assert [w.tp for w in followers.writes] == [("t", 1)]
    assert ctx.leadership[("t", 0)].state.leader == 1 and ctx.leadership[("t", 0)].state.isr == [1]
    assert rsm.still_led_by(ctx, 1, replicated) == [("t", 0)]

    # a retry decides the same: still nothing to write, still remaining
    assert psm.elect(ctx, [("t", 0)], psm.CONTROLLED_SHUTDOWN).writes == []


def test_the_last_isr_member_gone_after_a_failed_controlled_shutdown_leaves_its_partition_offline_with_it_in_the_isr():
    # The broker stopped anyway; its death is handled as a failure (onBrokerFailure): the offline election finds no
    # live ISR member (unclean election off) and the OfflineReplica transition keeps the last member in the ISR.
    ctx = context(assignments={"t": {0: [1, 2, 3]}}, states={("t", 0): (1, [1], 5)})
    ctx.shutting_down.add(1)
    kill(ctx, 1, 2, 3)
    ctx.shutting_down.discard(1)
    elected = psm.elect(ctx, [("t", 0)], psm.OFFLINE, unclean_default=False)
    states = [w.state for w in elected.writes]
    for write in elected.writes:
        ctx.leadership[write.tp] = PartitionLeadership(write.state, 5)
    states += [w.state for w in rsm.to_offline(ctx, 1, [("t", 0)]).writes]
    assert states and all(s.leader == NO_LEADER and s.isr == [1] for s in states)


# --- replica states ------------------------------------------------------------------------------------

def test_offline_replica_leaves_every_isr_but_the_last_member_stays():
    ctx = context(assignments={"t": {0: [1, 2], 1: [2, 3], 2: [2]}},
                  states={("t", 0): (1, [1, 2], 0), ("t", 1): (3, [3], 0), ("t", 2): (2, [2], 1)})
    kill(ctx, 2)
    changes = rsm.to_offline(ctx, 2)
    by_tp = {w.tp: w.state for w in changes.writes}
    assert by_tp[("t", 0)].isr == [1] and by_tp[("t", 0)].leader == 1
    assert by_tp[("t", 2)].isr == [2] and by_tp[("t", 2)].leader == NO_LEADER and by_tp[("t", 2)].leader_epoch == 2
    assert ("t", 1) not in by_tp


def test_online_replicas_hear_leader_and_isr_only_for_partitions_with_a_live_leader():
    ctx = context(assignments={"t": {0: [1, 2], 1: [2, 3]}},
                  states={("t", 0): (1, [1, 2], 0), ("t", 1): (NO_LEADER, [3], 0)})
    changes = rsm.to_online(ctx, [2])
    assert [(e.brokers, e.tp) for e in changes.leader_and_isr] == [((2,), ("t", 0))]


def test_failover_finds_dead_brokers_still_in_an_isr():
    ctx = context(live=(1, 2), states={("t", 0): (1, [1, 2, 3], 0)})
    assert rsm.replicas_in_dead_isr(ctx) == [3]


# --- topic deletion ------------------------------------------------------------------------------------

def test_topic_deletion_waits_for_every_replica_and_drops_unknown_requests():
    ctx = context(live=(1, 2), assignments={"a": {0: [1, 2]}, "b": {0: [2, 3]}})
    decision = decide_topic_deletion(ctx, ["a", "b", "nope"], delete_topic_enable=True)
    assert decision.ready == ["a"] and decision.waiting == {"b": [3]} and decision.unknown == ["nope"]
    assert decision.to_delete == {"a", "b"}
    stops = rsm.deletion_started(ctx, "a").stop_replicas
    assert [(s.broker, s.delete, s.leader_epoch) for s in stops] == [(1, True, -2), (2, True, -2)]
    disabled = decide_topic_deletion(ctx, ["a"], delete_topic_enable=False)
    assert disabled.unknown == ["a"] and disabled.ready == [] and disabled.to_delete == set()
