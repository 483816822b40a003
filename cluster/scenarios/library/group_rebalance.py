"""A consumer group survives a member's death (reference 3.10's group stories): the member is killed without a
LeaveGroup; after its session timeout the coordinator rebalances and its partitions move to the survivor, which
resumes each at the group's committed offset, so no value is skipped and none read twice.

Two members (confluent-kafka, each its own process, committing synchronously after every poll) share a topic's
four partitions. Everything produced so far is consumed and committed before the kill; more is written after."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

TOPIC, GROUP, PARTITIONS = "orders", "billing", 4
SESSION_MS = 6000  # group.min.session.timeout.ms: the shortest session a member may ask for

SCENARIO = Scenario(
    name="group-rebalance",
    title="A consumer group member dies: its partitions move, committed offsets keep the place",
    summary=f"Three brokers; topic '{TOPIC}' with {PARTITIONS} partitions; group '{GROUP}' with two members "
            f"(session.timeout.ms={SESSION_MS}), each committing after every poll.",
    topics=(Topic(TOPIC, replicas=3, partitions=PARTITIONS),),
    steps=(
        Step(f"20 values to each of the {PARTITIONS} partitions, acks=all.",
             "produce_partitions", {"topic": TOPIC, "partitions": PARTITIONS, "count": 20, "label": "first"},
             expect=(Expect("first.acknowledged", "==", 20 * PARTITIONS),)),
        Step("Two members join the group; the coordinator's rebalance gives each two partitions.",
             "start_consumers", {"topic": TOPIC, "group": GROUP, "count": 2, "partitions": PARTITIONS,
                                 "session_timeout_ms": SESSION_MS},
             expect=(Expect(f"assignment:{GROUP}/0", "has size", 2, "the range assignor splits 4 partitions 2/2"),
                     Expect(f"assignment:{GROUP}/1", "has size", 2))),
        Step("They consume everything and commit where they are.",
             "wait_consumed", {"group": GROUP, "partitions": PARTITIONS, "per_partition": 20},
             expect=(Expect(f"consumed:{GROUP}", "==", 20 * PARTITIONS),
                     Expect(f"committed:{GROUP}", "==", dict.fromkeys(range(PARTITIONS), 20),
                            "a committed offset is the next one to read"))),
        Step("kill -9 member 0: no LeaveGroup. Its partitions are orphaned until the coordinator expires its "
             "session.",
             "kill9_consumer", {"member": f"{GROUP}/0"},
             expect=(Expect("orphaned", "has size", 2),)),
        Step("10 more values to each partition, the orphaned ones included.",
             "produce_partitions", {"topic": TOPIC, "partitions": PARTITIONS, "count": 10, "label": "second"},
             expect=(Expect("second.acknowledged", "==", 10 * PARTITIONS),)),
        Step("The session times out, the group rebalances, and the survivor takes the orphaned partitions. It "
             "fetches the committed offsets and goes on from there.",
             "wait_for_takeover", {"group": GROUP, "partitions": PARTITIONS},
             expect=(Expect("takeover_s", ">=", SESSION_MS / 1000 * 0.8,
                            "a silent member is noticed only when its session times out"),
                     Expect(f"assignment:{GROUP}/1", "has size", PARTITIONS, "the survivor owns every partition"),
                     Expect("resumed_at", "==", "$committed_at_kill", "each resumes at the committed offset"))),
        Step("Wait until the survivor has consumed and committed everything.",
             "wait_consumed", {"group": GROUP, "partitions": PARTITIONS, "per_partition": 30},
             expect=(Expect(f"skipped:{GROUP}", "==", 0, "nothing below the committed offsets is left unread"),
                     Expect(f"read_twice:{GROUP}", "==", 0,
                            "the dead member had committed all it read: nothing is read again"),
                     Expect(f"committed:{GROUP}", "==", dict.fromkeys(range(PARTITIONS), 30)))),
    ),
)
