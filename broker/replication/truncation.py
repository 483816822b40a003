"""Where a follower cuts its log before fetching from a new leader: the three historical rules, as one
named broker setting (``kafkasim.replica.truncation.rule``) so a class can replay why each was replaced.

* ``high-watermark`` (Kafka <= 0.10.2): truncate to the local high watermark. Loses acknowledged data
  when the HW lagged the leader's and this replica is then elected (KIP-101 scenario 1), and can leave
  diverged logs after a double crash (scenario 2).
* ``kip-101`` (0.11-1.1): ask the leader for the end offset of the local latest epoch; truncate to
  min(that, LEO). One lookup: fast successive unclean elections can still diverge (KIP-279 scenario).
* ``kip-279`` (2.0+, default): the leader answers the largest epoch it has <= the one asked and where it
  ends; if that epoch is not ours, truncate to where ours ends and ask again, until the logs agree.
Pure functions: the caller does the RPCs and the truncation.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

UNDEFINED = -1


class TruncationRule(enum.StrEnum):
    HIGH_WATERMARK = "high-watermark"
    KIP_101 = "kip-101"
    KIP_279 = "kip-279"


@dataclass(frozen=True)
class TruncationStep:
    """Truncate to ``offset``; if not ``done``, ask the leader again about the (new) latest local epoch."""

    offset: int
    done: bool


def truncation_step(rule: TruncationRule, *, leader_epoch: int, leader_end_offset: int, high_watermark: int,
                    log_end_offset: int, local_end_offset_for: Callable[[int], tuple[int, int]]) -> TruncationStep:
    """One answer (leader_epoch, leader_end_offset) from the leader's OffsetsForLeaderEpoch for our latest
    epoch; ``local_end_offset_for(epoch)`` is our own epoch cache's answer to the same question."""
    if rule is TruncationRule.HIGH_WATERMARK or leader_end_offset == UNDEFINED:
        # the leader knows nothing of our epoch (or we track none): the pre-KIP-101 fallback
        return TruncationStep(min(high_watermark, log_end_offset), True)
    if rule is TruncationRule.KIP_101 or leader_epoch == UNDEFINED:
        return TruncationStep(min(leader_end_offset, log_end_offset), True)
    local_epoch, local_end = local_end_offset_for(leader_epoch)
    if local_epoch == UNDEFINED:
        return TruncationStep(min(leader_end_offset, log_end_offset), True)
    if local_epoch != leader_epoch:
        # we never had the leader's epoch: cut our own last epoch off and ask about the one before
        return TruncationStep(min(local_end, log_end_offset), False)
    return TruncationStep(min(local_end, leader_end_offset, log_end_offset), True)
