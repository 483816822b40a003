"""A controlled shutdown (SIGTERM) asks the controller to move the broker's leaderships first, so producers
barely notice; a kill -9 leaves the partition leaderless until ZooKeeper expires the session. Last, the case a
controlled shutdown cannot help: the stopping broker is the only ISR member left, so the controller leaves it leading,
the broker asks controlled.shutdown.max.retries times in all (3; 500 ms apart in the classroom profile), then stops
anyway, and the partition goes offline as after a crash (Kafka 2.8's ControlledShutdownPartitionLeaderElectionStrategy
fails and leaves the leader in place)."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

SCENARIO = Scenario(
    name="controlled-shutdown",
    title="Controlled shutdown versus kill -9 of a leader",
    summary="Topic 'orders', 3 replicas. A producer writes with acks=all the whole time (retries on). First the "
            "leader is stopped politely, then the next leader is killed; we measure the longest time a value "
            "waited for its acknowledgement. Then topic 'lonely' (2 replicas) loses its follower to a kill -9 and its "
            "leader, now the only ISR member, is stopped politely: nobody can take over.",
    topics=(Topic("orders", replicas=3, leader="not-controller"), Topic("lonely", replicas=2, leader="not-controller")),
    steps=(
        Step("Start a producer writing a value every 20 ms with acks=all.",
             "start_producer", {"topic": "orders", "label": "polite", "acks": "all"}),
        Step("SIGTERM the leader: it sends ControlledShutdown to the controller, which elects new leaders for "
             "its partitions before the broker stops.",
             "controlled_shutdown", {"leader_of": "orders"},
             expect=(Expect("leader:orders", "!=", "$stopped", "leadership moves before the broker stops"),)),
        Step("Let the producer write 20 more values, then stop it.",
             "wait_for_acks", {"label": "polite", "more": 20}),
        Step("Stop the producer and count.",
             "stop_producer", {"label": "polite"},
             expect=(Expect("polite.failed", "==", 0, "no produce fails under a controlled shutdown"),)),
        Step("Bring the stopped broker back and wait for the full ISR.",
             "start", {"broker": "$stopped"}),
        Step("Wait until it is in sync again.",
             "wait_for_isr", {"topic": "orders", "size": 3}),
        Step("Start a second producer, the same way.",
             "start_producer", {"topic": "orders", "label": "rude", "acks": "all"}),
        Step("kill -9 the current leader: nobody moves its leadership until its ZooKeeper session expires.",
             "kill9", {"leader_of": "orders"}),
        Step("Wait for the election.",
             "wait_for_leader_change", {"topic": "orders", "old": "$killed"}),
        Step("Let the producer write 20 more values.",
             "wait_for_acks", {"label": "rude", "more": 20}),
        Step("Stop the producer and compare the two outages.",
             "stop_producer", {"label": "rude"},
             expect=(Expect("rude.longest_wait_s", ">=", 1.5,
                            "writes wait for the session timeout (2 s) and the election"),
                     Expect("rude.longest_wait_s", ">", "$polite.longest_wait_s",
                            "a kill -9 costs a longer outage than a controlled shutdown"),
                     Expect("rude.failed", "==", 0, "with retries the producer rides the outage out"))),
        Step("Bring the killed broker back and read every replica.",
             "start", {"broker": "$killed"}),
        Step("Read every replica back.",
             "read_all", {"topics": ["orders"]},
             expect=(Expect("lost:orders", "==", 0, "acks=all: nothing acknowledged is lost either way"),)),
        Step("kill -9 the follower of lonely: once its session expires the controller takes it out of the ISR, and "
             "lonely's leader is the last ISR member.",
             "kill9", {"followers_of": "lonely"}),
        Step("Wait until the ISR of lonely is its leader alone.",
             "wait_for_isr", {"topic": "lonely", "size": 1, "without": "$killed"},
             expect=(Expect("isr:lonely", "has size", 1, "a dead follower leaves the ISR"),)),
        Step("SIGTERM lonely's leader. The controller finds no other live ISR member to elect, so it leaves the "
             "leader where it is and answers with lonely-0 among the partitions remaining; the broker waits "
             "controlled.shutdown.retry.backoff.ms and asks again, three attempts in all, then stops anyway.",
             "controlled_shutdown", {"leader_of": "lonely"},
             expect=(Expect("shutdown_attempts", "==", 3, "controlled.shutdown.max.retries is 3"),
                     Expect("shutdown_remaining", "contains", "lonely-0",
                            "no other ISR member is alive: lonely-0 stays led by the stopping broker"),
                     Expect("leaders_while_stopping:lonely", "does not contain", -1,
                            "the controller writes no leader -1 while the broker is still registered"))),
        Step("Its death is handled as a crash: the offline election finds no live ISR member. lonely-0 stays "
             "offline until that broker starts again.",
             "wait_for_leader", {"topic": "lonely", "leader": -1},
             expect=(Expect("leader:lonely", "==", -1, "offline until its last ISR member returns (unclean "
                            "election is off)"),
                     Expect("isr:lonely", "contains", "$stopped", "the ISR keeps its last member"))),
    ),
)
