"""A controlled shutdown (SIGTERM) asks the controller to move the broker's leaderships first, so producers
barely notice; a kill -9 leaves the partition leaderless until ZooKeeper expires the session."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

SCENARIO = Scenario(
    name="controlled-shutdown",
    title="Controlled shutdown versus kill -9 of a leader",
    summary="Topic 'orders', 3 replicas. A producer writes with acks=all the whole time (retries on). First the "
            "leader is stopped politely, then the next leader is killed; we measure the longest time a value "
            "waited for its acknowledgement.",
    topics=(Topic("orders", replicas=3, leader="not-controller"),),
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
    ),
)
