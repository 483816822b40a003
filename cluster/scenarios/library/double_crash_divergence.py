"""KIP-101's scenario 2 (reference 3.10): both replicas lose power with an un-flushed tail. The one back first is
elected and writes at an offset the other still holds from before the crash. Truncating to the high watermark
(the rule before KIP-101) leaves the logs diverged for good while both count as in sync; leader epochs find where
the histories part and heal it.

Two brokers (no controller survives the "power failure" to tidy the ISR); kill -9 loses what was never fsynced
(kafkasim.log.simulate.unflushed.loss) and a segment holds one batch, so each append rolls and flushes the one
before. After recovery A = [0:m1, 1:m2] with HW 2 and B = [0:m1]; B comes back first and takes m3 at offset 1."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

TOPIC = "powerloss"


def story(rule: str, name: str) -> Scenario:
    diverges = rule == "high-watermark"
    return Scenario(
        name=name,
        title=f"Both replicas crash: divergent logs and the {rule} rule",
        summary=f"kafkasim.replica.truncation.rule={rule}. Two brokers, topic '{TOPIC}' on both; a power failure "
                "takes both, each with a different un-flushed tail.",
        brokers=2,
        topics=(Topic(TOPIC, replicas=2, leader="controller"),),
        overrides={"kafkasim.replica.truncation.rule": rule, "kafkasim.log.simulate.unflushed.loss": "true",
                   "log.segment.bytes": "120"},  # a one-record batch of these values is about 70 bytes
        steps=(
            Step("m1 and m2 to the leader A with acks=all; A checkpoints HW 2 and the follower B holds m2, not yet "
                 "flushed. B is frozen, A takes one more value (acks=1), whose segment roll flushes A's m2. Then "
                 "the power fails: kill -9 of both.",
                 "crash_both_with_unflushed_tails", {"topic": TOPIC},
                 expect=(Expect("m2.offset", "==", 1),)),
            Step("B comes back first. Its recovery drops its un-flushed m2; it is still in the ISR (no controller "
                 "was left to remove it), so it is elected, in a new epoch.",
                 "start", {"broker": "$b"}),
            Step("Wait for B to lead.",
                 "wait_for_leader", {"topic": TOPIC, "leader": "$b"},
                 expect=(Expect("leader_epoch:powerloss", "==", 1, "a new leader: epoch 0 → 1"),)),
            Step("B takes m3, at offset 1: where A still holds m2.",
                 "produce_each", {"topic": TOPIC, "values": ["m3"], "acks": "all", "label": "m3"},
                 expect=(Expect("m3.offsets", "==", [1], "only the flushed m1 survived on B"),)),
            Step("A comes back (its recovery keeps the flushed m1, m2 and its HW checkpoint says 2) and follows B.",
                 "start", {"broker": "$a"}),
            Step("A rejoins the ISR: both count as in sync.",
                 "wait_for_isr", {"topic": TOPIC, "size": 2},
                 expect=(Expect("truncations:powerloss", "==", 0 if diverges else 1,
                                "A's HW (2) is its log end: nothing to cut" if diverges else
                                "A asks B where epoch 0 ends (offset 1) and cuts m2"),)),
            Step("Compare the replicas offset by offset.",
                 "read_all", {"topics": [TOPIC], "timeout_s": 5},
                 expect=(Expect("divergent_offsets:powerloss", "==", [1] if diverges else [],
                                "offset 1 is m2 on A and m3 on B, for good" if diverges else
                                "A fetched m3 after its cut"),
                         Expect("replicas_agree:powerloss", "==", not diverges),
                         Expect("lost:powerloss", "==", 2, "the un-flushed tails (m2 and A's last value) are gone "
                                "from the leader either way: a power failure beats acks=all without fsync"))),
        ),
    )


SCENARIO = story("high-watermark", "double-crash-divergence")
EPOCHS = story("kip-101", "double-crash-divergence-epochs")
