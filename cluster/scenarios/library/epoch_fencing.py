"""Leader epoch fencing (reference 3.10, story 4; KIP-320): requests carry the leader epoch their sender believes
in, and a leader refuses an older one with FENCED_LEADER_EPOCH (a newer one: UNKNOWN_LEADER_EPOCH), so nobody
fetches or truncates against a state the leader has already left behind.

A follower is frozen (SIGSTOP) past its ZooKeeper session: the controller drops it from the ISR, which starts a
new leader epoch, and tells only the live leader. Thawed, the follower still believes in the old epoch: its next
fetch is fenced; it waits for the LeaderAndIsr its new registration brings, then catches up and rejoins."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

TOPIC = "fenced"

SCENARIO = Scenario(
    name="epoch-fencing",
    title="Leader epochs fence a follower that slept through an epoch",
    summary="Two brokers; topic 'fenced' on both, led by the controller. The follower is frozen (SIGSTOP) until "
            "ZooKeeper expires its session, then thawed: it comes back with a leader epoch that is over.",
    brokers=2,
    topics=(Topic(TOPIC, replicas=2, leader="controller"),),
    steps=(
        Step("One value with acks=all: both replicas have it.",
             "produce", {"topic": TOPIC, "count": 1, "acks": "all", "label": "before"},
             expect=(Expect("before.acknowledged", "==", 1), Expect("leader_epoch:fenced", "==", 0))),
        Step("Freeze the follower (SIGSTOP): alive, but silent, like a long GC pause.",
             "freeze", {"followers_of": TOPIC},
             remember={"epoch_before": "leader_epoch:fenced", "leader": "leader:fenced"}),
        Step("Its ZooKeeper session expires; the controller removes it from the ISR. An ISR change by the controller "
             "starts a new leader epoch, and only the live leader hears of it.",
             "wait_for_isr", {"topic": TOPIC, "size": 1, "without": "$frozen"},
             expect=(Expect("isr:fenced", "==", ["$leader"]),
                     Expect("leader_epoch:fenced", "==", "$epoch_before+1", "the controller bumps the epoch"))),
        Step("One more value with acks=all: the leader alone acknowledges it.",
             "produce", {"topic": TOPIC, "count": 1, "acks": "all", "label": "while-frozen"},
             expect=(Expect("while-frozen.acknowledged", "==", 1, "the ISR is only the leader"),)),
        Step("Thaw the follower (SIGCONT). It goes on fetching with the epoch it believed in.",
             "thaw", {"broker": "$frozen"}),
        Step("The leader refuses that fetch: FENCED_LEADER_EPOCH. The follower stops fetching until a LeaderAndIsr "
             "tells it the new epoch.",
             "wait_for_fenced", {"broker": "$frozen"},
             expect=(Expect("fenced_by", "==", "$leader", "the leader checks the epoch of every fetch"),
                     Expect("fenced_epoch", "==", "$epoch_before", "the follower still believed in the old one"))),
        Step("It registers again, the controller sends it the new epoch, it catches up and rejoins the ISR.",
             "wait_for_isr", {"topic": TOPIC, "size": 2},
             expect=(Expect("isr:fenced", "contains", "$frozen", "a caught-up follower rejoins"),
                     Expect("leader_epoch:fenced", "==", "$epoch_before+1",
                            "a leader growing its ISR keeps its epoch"),
                     Expect("truncations:fenced", "==", 0, "nothing it had was divergent"))),
        Step("A client that still believes in the old epoch asks the leader where epoch 0 ends.",
             "ask_epoch_end", {"topic": TOPIC, "current_leader_epoch": "$epoch_before", "leader_epoch": 0,
                               "label": "stale"},
             expect=(Expect("stale.error", "==", "FENCED_LEADER_EPOCH", "an older epoch than the leader's"),)),
        Step("One that believes in an epoch the leader has not reached yet.",
             "ask_epoch_end", {"topic": TOPIC, "current_leader_epoch": "$epoch_before+2", "leader_epoch": 0,
                               "label": "ahead"},
             expect=(Expect("ahead.error", "==", "UNKNOWN_LEADER_EPOCH", "a newer epoch: the leader is behind"),)),
        Step("One that knows the current epoch gets the answer: epoch 0 ends at offset 1, where epoch 1 began.",
             "ask_epoch_end", {"topic": TOPIC, "current_leader_epoch": "$epoch_before+1", "leader_epoch": 0,
                               "label": "current"},
             expect=(Expect("current.error", "==", "NONE"),
                     Expect("current.end_offset", "==", 1, "the leader's log end when the ISR shrank"))),
        Step("Read both replicas.",
             "read_all", {"topics": [TOPIC]},
             expect=(Expect("lost:fenced", "==", 0), Expect("replicas_agree:fenced", "==", True))),
    ),
)
