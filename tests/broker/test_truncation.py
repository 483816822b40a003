"""The three follower truncation rules, driven with the answers a leader would give."""

from broker.replication.truncation import TruncationRule, TruncationStep, truncation_step


def cache(entries: list[tuple[int, int]], log_end_offset: int):
    """An epoch cache's end_offset_for over (epoch, start offset) entries, as KIP-279 defines it."""

    def end_offset_for(requested: int) -> tuple[int, int]:
        if not entries:
            return -1, -1
        if requested == entries[-1][0]:
            return requested, log_end_offset
        higher = [e for e in entries if e[0] > requested]
        floor = [e for e in entries if e[0] <= requested]
        if not higher:
            return -1, -1
        return (floor[-1][0] if floor else requested), higher[0][1]
    return end_offset_for


def step(rule, leader_epoch, leader_end, hw, leo, entries):
    return truncation_step(rule, leader_epoch=leader_epoch, leader_end_offset=leader_end, high_watermark=hw,
                           log_end_offset=leo, local_end_offset_for=cache(entries, leo))


def test_high_watermark_rule_cuts_at_the_local_high_watermark_whatever_the_leader_says():
    assert step(TruncationRule.HIGH_WATERMARK, 1, 10, 7, 10, [(0, 0), (1, 5)]) == TruncationStep(7, True)


def test_a_leader_that_does_not_know_the_epoch_sends_every_rule_back_to_the_high_watermark():
    for rule in TruncationRule:
        assert step(rule, -1, -1, 4, 9, [(0, 0)]) == TruncationStep(4, True)


def test_kip_101_truncates_to_the_leaders_end_of_our_epoch_in_one_step():
    assert step(TruncationRule.KIP_101, 0, 6, 3, 10, [(0, 0), (1, 8)]) == TruncationStep(6, True)


def test_kip_101_never_truncates_above_the_local_log_end():
    assert step(TruncationRule.KIP_101, 2, 50, 3, 10, [(2, 0)]) == TruncationStep(10, True)


def test_kip_279_agrees_at_once_when_both_know_the_epoch():
    # leader: epoch 1 ends at 8; we also have epoch 1 (starting at 5) up to LEO 12
    assert step(TruncationRule.KIP_279, 1, 8, 3, 12, [(0, 0), (1, 5)]) == TruncationStep(8, True)


def test_kip_279_walks_back_when_the_leader_answers_an_epoch_we_never_had():
    # we asked about our epoch 2; the leader's largest epoch <= 2 is 1, which we never had: cut our
    # epoch 2 off (it starts at 6) and ask again
    assert step(TruncationRule.KIP_279, 1, 9, 3, 12, [(0, 0), (2, 6)]) == TruncationStep(6, False)


def test_kip_279_takes_the_smaller_end_when_the_epoch_is_shared():
    # both have epoch 0; ours ends at 6 (epoch 2 starts there), the leader's ends at 9
    assert step(TruncationRule.KIP_279, 0, 9, 3, 12, [(0, 0), (2, 6)]) == TruncationStep(6, True)
