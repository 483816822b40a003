"""KIP-101's scenario 1: a follower that truncates to its high watermark when it becomes a follower again, and is
elected before it refetches, loses a write the leader had acknowledged to an acks=all producer. The same story
with leader epochs (KIP-101) keeps it: the follower cuts nothing it cannot prove divergent.

Brokers L (leader), F (the controller, so nothing else moves) and X. m2 is acknowledged once both followers have
it, but F learns the new high watermark only with its next fetch, which L parks for replica.fetch.wait.max.ms
(2 s here). In that window L dies and X shuts down; X leaving the ISR makes F a follower in a new epoch, so F
truncates by its rule; then L's session expires and F, the last of the ISR, is elected."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic


def story(rule: str, name: str) -> Scenario:
    loses = rule == "high-watermark"
    lost, why = (1, "F cut m2 at its HW (1), then led without it") if loses else (
        0, "F could not ask the dead leader where epoch 0 ends, so it cut nothing")
    return Scenario(
        name=name,
        title=f"An acknowledged write and follower truncation by the {rule} rule",
        summary=f"kafkasim.replica.truncation.rule={rule}. Topic 'acked', 3 replicas, acks=all; the leader dies "
                "the instant it acknowledged m2, before its follower learnt the new high watermark.",
        topics=(Topic("acked", replicas=3, leader="not-controller"),),
        overrides={"kafkasim.replica.truncation.rule": rule, "replica.fetch.wait.max.ms": "2000"},
        steps=(
            Step("m1 then m2 to the leader with acks=all; the moment m2 is acknowledged, kill -9 the leader and "
                 "shut the third broker down (SIGTERM). The controller (F) keeps m2 in its log with HW = 1.",
                 "acknowledged_then_crash", {"topic": "acked"},
                 expect=(Expect("m2.error", "==", "NONE", "both followers had fetched m2: acks=all is satisfied"),
                         Expect("m2.offset", "==", 1)),
                 remember={"follower": "controller"}),
            Step("Wait for L's session to expire: F, alone in the ISR, is elected.",
                 "wait_for_leader_change", {"topic": "acked", "old": "$killed"},
                 expect=(Expect("leader:acked", "==", "$follower", "the last replica in the ISR"),
                         # X, still waiting for its controlled shutdown's answer, may follow F and truncate as well
                         Expect("truncations:acked", ">=" if loses else "==", lost,
                                "the high-watermark rule truncates on becoming a follower; epochs need the leader's "
                                "answer first"))),
            Step("Read the new leader's log: is the acknowledged m2 there?",
                 "read_all", {"topics": ["acked"]},
                 expect=(Expect("lost:acked", "==", lost, why),)),
            Step("Bring L and X back; they follow F and truncate to its log.",
                 "start", {"broker": ["$killed", "$stopped"]}),
            Step("Wait for the full ISR.",
                 "wait_for_isr", {"topic": "acked", "size": 3}),
            Step("Read every replica again.",
                 "read_all", {"topics": ["acked"]},
                 expect=(Expect("lost:acked", "==", lost, "gone from every replica" if loses else "kept everywhere"),
                         Expect("replicas_agree:acked", "==", True, "the replicas converge on F's log"))),
        ),
    )


SCENARIO = story("high-watermark", "hw-truncation")
EPOCHS = story("kip-101", "hw-truncation-epochs")
