"""Leader election strategies (Kafka's PartitionLeaderElectionAlgorithms). Pure: inputs in, decision out.

Every strategy keeps assignment order, because the first replica of an assignment is the preferred
leader and Kafka always picks the first eligible replica in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

from zk.znodes import NO_LEADER


@dataclass(frozen=True)
class Election:
    leader: int            # NO_LEADER when nobody can lead
    isr: list[int]
    unclean: bool = False


def offline_partition_election(assignment: list[int], isr: list[int], live: set[int],
                               unclean_allowed: bool) -> Election:
    """After a broker failure or for a partition without a leader: the first live ISR member leads.

    With no live ISR member, an unclean election picks the first live replica (and the ISR shrinks to it)
    only when allowed; otherwise the partition stays offline and keeps its last ISR, because the
    controller never writes an empty ISR.
    """
    live_isr = [replica for replica in assignment if replica in live and replica in isr]
    if live_isr:
        return Election(live_isr[0], [replica for replica in isr if replica in live])
    if unclean_allowed:
        live_replicas = [replica for replica in assignment if replica in live]
        if live_replicas:
            return Election(live_replicas[0], [live_replicas[0]], unclean=True)
    return Election(NO_LEADER, list(isr))


def preferred_replica_election(assignment: list[int], isr: list[int], live: set[int]) -> Election:
    """Kafka's PreferredReplicaPartitionLeaderElectionStrategy: the first replica of the assignment leads if it
    is alive and in the ISR, and the ISR stays as it is. Otherwise the election fails (NO_LEADER): moving
    leadership to any other replica would not restore the balance the assignment asked for."""
    if assignment and assignment[0] in live and assignment[0] in isr:
        return Election(assignment[0], list(isr))
    return Election(NO_LEADER, list(isr))


def controlled_shutdown_election(assignment: list[int], isr: list[int], live_or_shutting_down: set[int],
                                 shutting_down: set[int]) -> Election:
    """Kafka's ControlledShutdownPartitionLeaderElectionStrategy: the first replica of the assignment that is alive,
    in the ISR and not shutting down leads, and the shutting-down brokers leave the ISR.

    With no such replica (the shutting-down broker is the last ISR member alive) the election fails: NO_LEADER
    here means "nothing to write". Kafka leaves the partition as it is, led by the shutting-down broker, and
    answers it among the remaining partitions; the broker retries and, once out of retries, stops anyway, and
    the partition goes offline when its death is handled (Election.leaderForControlledShutdown gives no
    LeaderAndIsr, PartitionStateMachine.doElectLeaderForPartitions counts the partition as a failed election)."""
    candidates = [r for r in assignment if r in live_or_shutting_down and r in isr and r not in shutting_down]
    if not candidates:
        return Election(NO_LEADER, list(isr))
    return Election(candidates[0], [replica for replica in isr if replica not in shutting_down])


def remove_replica_from_isr(leader: int, isr: list[int], replica: int) -> tuple[int, list[int]]:
    """Controller-side ISR removal when a replica goes offline. The last ISR member stays in the ISR
    (with no leader) so that a later clean election can still find it."""
    new_leader = NO_LEADER if leader == replica else leader
    if isr == [replica]:
        return new_leader, list(isr)
    return new_leader, [member for member in isr if member != replica]
