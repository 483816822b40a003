"""acks=0, acks=1 and acks=all side by side: three producers, three topics led by the same broker, one kill -9
of that broker while its followers lag (frozen for a moment, still in the ISR). Only acks=all promises that an
acknowledged value survives the leader's death; acks=1 and acks=0 lose what the followers had not fetched."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

SCENARIO = Scenario(
    name="acks-side-by-side",
    title="acks=0, 1 and all under one leader kill",
    summary="Topics acks-0, acks-1 and acks-all have the same 3 replicas and the same leader. A producer per topic "
            "writes with its acks setting every 10 ms; the leader is killed while its followers lag; every value is "
            "read back.",
    topics=(Topic("acks-0", replicas=3, leader="not-controller"),
            Topic("acks-1", replicas=3, same_replicas_as="acks-0"),
            Topic("acks-all", replicas=3, same_replicas_as="acks-0")),
    steps=(
        Step("Start the acks=0 producer (fire and forget).",
             "start_producer", {"topic": "acks-0", "label": "p0", "acks": 0, "interval_ms": 10}),
        Step("Start the acks=1 producer (the leader's append is enough).",
             "start_producer", {"topic": "acks-1", "label": "p1", "acks": 1, "interval_ms": 10}),
        Step("Start the acks=all producer (every in-sync replica must have it).",
             "start_producer", {"topic": "acks-all", "label": "pall", "acks": "all", "interval_ms": 10}),
        Step("Freeze both followers (SIGSTOP) until the acks=1 producer got 20 more acknowledgements, then kill -9 "
             "the leader of all three topics and thaw the followers: they are still in the ISR (far less than "
             "replica.lag.time.max.ms passed), but never fetched what was written while they were frozen.",
             "kill_leader_while_followers_lag", {"topic": "acks-all", "label": "p1"},
             expect=(Expect("p1.acknowledged_while_frozen", ">=", 20, "acks=1: the leader's append is enough"),)),
        Step("Wait for the controller to elect new leaders.",
             "wait_for_leader_change", {"topic": "acks-all", "old": "$killed"},
             expect=(Expect("leader:acks-0", "!=", "$killed"), Expect("leader:acks-1", "!=", "$killed"))),
        Step("Let the acks=all producer get 20 more acknowledgements from the new leader.",
             "wait_for_acks", {"label": "pall", "more": 20}),
        Step("Stop the three producers; each waits for its last answers.",
             "stop_producer", {"label": ["p0", "p1", "pall"]},
             expect=(Expect("pall.failed", "==", 0, "with retries acks=all rides the failover out"),)),
        Step("Bring the old leader back; it truncates to the new leader's log.",
             "start", {"broker": "$killed"}),
        Step("Wait until it is in sync again.",
             "wait_for_isr", {"topic": "acks-all", "size": 3}),
        Step("Read every replica of the three topics and count the acknowledged values that are gone.",
             "read_all", {"topics": ["acks-0", "acks-1", "acks-all"]},
             expect=(Expect("lost:acks-all", "==", 0, "acks=all: acknowledged means on every in-sync replica"),
                     Expect("lost:acks-1", ">=", 1, "acks=1 loses what it acknowledged while the followers were "
                                                    "frozen: the new leader never had it"),
                     Expect("lost:acks-0", ">=", 1, "acks=0 loses what was sent while the followers were frozen"))),
    ),
)
