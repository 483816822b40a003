"""Every scenario by name, in the order `kafkasim scenario list` shows them."""

from __future__ import annotations

from cluster.processes import ClusterError
from cluster.scenarios.library import (
    acks_side_by_side,
    controlled_shutdown,
    controller_failover,
    double_crash_divergence,
    epoch_fencing,
    group_rebalance,
    hw_truncation,
    leader_failover,
    min_insync_replicas,
    unclean_election,
    unclean_leader_changes,
    zombie_coordinator,
    zombie_leader,
)
from cluster.scenarios.model import Scenario

DEMO = leader_failover.SCENARIO
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    leader_failover.SCENARIO,
    min_insync_replicas.SCENARIO,
    acks_side_by_side.SCENARIO,
    controller_failover.SCENARIO,
    controlled_shutdown.SCENARIO,
    hw_truncation.SCENARIO,
    hw_truncation.EPOCHS,
    unclean_election.SCENARIO,
    epoch_fencing.SCENARIO,
    double_crash_divergence.SCENARIO,
    double_crash_divergence.EPOCHS,
    unclean_leader_changes.SCENARIO,
    unclean_leader_changes.KIP279,
    group_rebalance.SCENARIO,
    zombie_leader.SCENARIO,
    zombie_coordinator.SCENARIO,
)}


def scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise ClusterError(f"no scenario {name!r}; `kafkasim scenario list` shows {', '.join(SCENARIOS)}")
    return SCENARIOS[name]
