"""KIP-279 (reference 3.10, story 3, from Kafka's EpochDrivenReplicationProtocolAcceptanceTest
.logsShouldNotDivergeOnUncleanLeaderElections): two replicas take turns leading, each alone, through unclean
elections (unclean.leader.election.enable=true, acks=1). KIP-101's single question "where does my latest epoch
end?" is answered with an offset past the divergence, so the follower keeps a stale tail; KIP-279 walks back
epoch by epoch to the common ancestor.

Two brokers; whichever is up alone is also the controller and elects itself. Offsets:epochs as in the reference:
A = [0:e0, 1:e2, 2:e2, 3:e2, 4:e4, 5:e4] and B = [0:e0, 1:e1, 2:e3] when B returns as A's follower."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

TOPIC = "flipflop"


def story(rule: str, name: str) -> Scenario:
    diverges = rule == "kip-101"
    return Scenario(
        name=name,
        title=f"Fast unclean leader changes and the {rule} rule",
        summary=f"kafkasim.replica.truncation.rule={rule}, unclean.leader.election.enable=true. Two brokers take "
                f"turns leading '{TOPIC}' alone, four elections in a row, each writing values the other never sees.",
        brokers=2,
        pause_s=0.25,   # 19 steps: --step is the pace to teach it at
        topics=(Topic(TOPIC, replicas=2, leader="controller"),),
        overrides={"kafkasim.replica.truncation.rule": rule, "unclean.leader.election.enable": "true"},
        steps=(
            Step("A leads (epoch 0): m0 with acks=all, on both replicas.",
                 "produce_each", {"topic": TOPIC, "values": ["m0"], "acks": "all", "label": "e0"},
                 expect=(Expect("e0.acknowledged", "==", 1),),
                 remember={"a": "leader:flipflop"}),
            Step("kill -9 A. B, in the ISR, is elected cleanly.",
                 "kill9", {"leader_of": TOPIC}),
            Step("Wait for B to lead.",
                 "wait_for_leader_change", {"topic": TOPIC, "old": "$a"},
                 expect=(Expect("leader_epoch:flipflop", "==", 1),)),
            Step("B writes b1 (acks=1) at offset 1.",
                 "produce_each", {"topic": TOPIC, "values": ["b1"], "label": "e1"},
                 expect=(Expect("e1.offsets", "==", [1]),),
                 remember={"b": "leader:flipflop"}),
            Step("kill -9 B.", "kill9", {"broker": "$b"}),
            Step("A comes back alone.", "start", {"broker": "$a"}),
            Step("A is not in the ISR [B]: an unclean election, epoch 2.",
                 "wait_for_leader", {"topic": TOPIC, "leader": "$a"},
                 expect=(Expect("leader_epoch:flipflop", "==", 2), Expect("isr:flipflop", "==", ["$a"]))),
            Step("A writes a1, a2, a3 at offsets 1..3: offset 1 now holds b1 on B and a1 on A.",
                 "produce_each", {"topic": TOPIC, "values": ["a1", "a2", "a3"], "label": "e2"},
                 expect=(Expect("e2.offsets", "==", [1, 2, 3]),)),
            Step("kill -9 A.", "kill9", {"broker": "$a"}),
            Step("B comes back alone.", "start", {"broker": "$b"}),
            Step("Unclean again: B leads in epoch 3.",
                 "wait_for_leader", {"topic": TOPIC, "leader": "$b"},
                 expect=(Expect("leader_epoch:flipflop", "==", 3),)),
            Step("B writes b2 at offset 2: B = [m0, b1, b2].",
                 "produce_each", {"topic": TOPIC, "values": ["b2"], "label": "e3"},
                 expect=(Expect("e3.offsets", "==", [2]),)),
            Step("kill -9 B.", "kill9", {"broker": "$b"}),
            Step("A comes back alone.", "start", {"broker": "$a"}),
            Step("Unclean: A leads in epoch 4.",
                 "wait_for_leader", {"topic": TOPIC, "leader": "$a"},
                 expect=(Expect("leader_epoch:flipflop", "==", 4),)),
            Step("A writes a4, a5 at offsets 4, 5: A = [m0, a1, a2, a3, a4, a5].",
                 "produce_each", {"topic": TOPIC, "values": ["a4", "a5"], "label": "e4"},
                 expect=(Expect("e4.offsets", "==", [4, 5]),)),
            Step("B comes back as A's follower and asks where its latest epoch (3) ends on A. A has no epoch 3: it "
                 "answers with the end of epoch 2, offset 4.", "start", {"broker": "$b"}),
            Step("B rejoins the ISR.",
                 "wait_for_isr", {"topic": TOPIC, "size": 2},
                 expect=(Expect("truncations:flipflop", "==", 0 if diverges else 2,
                                "KIP-101 cuts to min(4, B's log end 3): nothing" if diverges else
                                "KIP-279 asks again, epoch by epoch: cut to 2, then to 1, the common ancestor"),)),
            Step("Compare the replicas offset by offset.",
                 "read_all", {"topics": [TOPIC], "timeout_s": 5},
                 expect=(Expect("divergent_offsets:flipflop", "==", [1, 2] if diverges else [],
                                "B kept b1, b2 where A has a1, a2, and fetched a3.. on top" if diverges else
                                "B holds exactly A's log"),
                         Expect("replicas_agree:flipflop", "==", not diverges),
                         Expect("lost:flipflop", "==", 2, "b1 and b2 were acknowledged (acks=1) by a leader "
                                "whose writes the unclean elections threw away"))),
        ),
    )


SCENARIO = story("kip-101", "unclean-leader-changes")
KIP279 = story("kip-279", "unclean-leader-changes-kip279")
