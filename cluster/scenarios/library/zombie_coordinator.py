"""A zombie group coordinator breaks exactly-once, as in Apache Kafka 2.8 (issue 32, docs/zombie-coordinator.md).

Broker X coordinates a consume-transform-produce group (it leads the group's __consumer_offsets partition) and
nothing else of the story: not the controller, not the transaction coordinator, no replica of the input or the
output. X is cut off from ZooKeeper, and only from ZooKeeper. Its session expires; the controller elects another
leader Y of the partition and tells only the brokers it sees alive (KafkaController.processBrokerChange removes X
from its channel), and Y loads the group — the same member, the same generation. X hears nothing: it still owns the
group (GroupMetadataManager.ownedPartitions changes only on onElection/onResignation), answers heartbeats and
OffsetFetch from memory (GroupCoordinator.validateGroupStatus, handleFetchOffsets → getOffsets) and can append
nothing (its followers fetch from Y, its ISR cannot shrink: the high watermark is frozen, an acks=all write times out
with REQUEST_TIMED_OUT, which GroupMetadataManager.storeOffsets passes on). The transformer's producer commits its
offsets at Y; its consumer, still a member at X, rewinds after an abort to X's older offsets and copies inputs
whose copies are already committed: duplicates in the read_committed output.

The script is tests/transaction/test_zombie_coordinator.py's fixed schedule. Needs root: every process runs in a
network namespace of its own, so that only X's link to ZooKeeper is cut."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

INPUT, OUTPUT, OFFSETS = "txn-input", "txn-output", "__consumer_offsets"
INPUTS, BATCH = 40, 10

SCENARIO = Scenario(
    name="zombie-coordinator",
    title="A zombie group coordinator breaks exactly-once: cut off from ZooKeeper, it answers stale offsets",
    summary=f"Three brokers in network namespaces; a transformer copies '{INPUT}' to '{OUTPUT}' in transactions "
            "(read_committed consumer, transactional producer). Its group's coordinator, a broker that does nothing "
            "else for the story, loses ZooKeeper, and only ZooKeeper.",
    netns=True,
    # the input and the output on the controller and one other broker: the third coordinates the group alone
    topics=(Topic(INPUT, replicas=2, leader="controller"), Topic(OUTPUT, replicas=2, same_replicas_as=INPUT)),
    pause_s=1.5,
    steps=(
        Step(f"The cast. X, the broker that is neither the controller nor a replica of the topics, leads the "
             f"{OFFSETS} partition of the group (hash(group) % 10): X is its coordinator. Another broker "
             f"coordinates the transformer's transactional id. {INPUTS} inputs in-0..in-{INPUTS - 1} are written; "
             "the transformer's consumer (read_committed, no auto-commit) subscribes and its producer initializes "
             "its transactions.",
             "start_transformer", {"input": INPUT, "output": OUTPUT, "group": "copier", "count": INPUTS,
                                   "transaction_size": BATCH},
             expect=(Expect("inputs.acknowledged", "==", INPUTS),)),
        Step(f"One transaction: consume up to {BATCH} inputs, produce their copies t:in-N@... to '{OUTPUT}', send the "
             "consumer's positions to the transaction (TxnOffsetCommit, at the group coordinator X), commit.",
             "transaction", {"label": "first"},
             expect=(Expect("first.outcome", "==", "ok"),
                     Expect("first.from", "==", 0, "a new group starts at the earliest offset"))),
        Step("Ask X for the group's committed offset: OffsetFetch v7 with require_stable, as a read_committed member "
             "asks (KIP-447).",
             "fetch_offsets", {"group": "$group", "at": {"x": "$coordinator"}},
             expect=(Expect("x.offset", "==", "$first.next", "a committed offset is the next input to read"),
                     Expect("x.state", "==", "Stable"))),
        Step("Cut X off from ZooKeeper: its namespace drops every packet to and from ZooKeeper. The other brokers "
             "and the clients still reach it; the consumer goes on heartbeating at X. (From here to the heal, the "
             "new coordinator keeps the member for its session, 120 s: at --step, go on within two minutes.)",
             "isolate", {"broker": "$coordinator", "peers": "zookeeper"}),
        Step("After zookeeper.session.timeout.ms (2 s) X's session expires; the controller sees it leave "
             "/brokers/ids and elects a new leader Y of every partition X led. Y becomes the group's coordinator: "
             "RequestHandlerHelper.onLeadershipChange → GroupCoordinator.onElection → "
             "GroupMetadataManager.scheduleLoadGroupAndOffsets replays the partition.",
             "wait_for_coordinator_move", {"old": "$isolated"},
             expect=(Expect("new_coordinator", "!=", "$isolated", "to ZooKeeper, X is dead"),
                     Expect("offsets.leader_epoch", "==", "$offsets_leader_epoch+1", "an election: a new epoch"))),
        Step("Ask Y. It loaded the group as X wrote it (GroupMetadataManager.doLoadGroupsAndOffsets, loadGroup): "
             "the same offsets, the same member and generation, Stable; GroupCoordinator.onGroupLoaded gives the "
             "member a session from now.",
             "fetch_offsets", {"group": "$group", "at": {"y": "$new_coordinator"}},
             expect=(Expect("y.offset", "==", "$x.offset"),
                     Expect("y.generation", "==", "$x.generation", "replayed from X's own group record"),
                     Expect("y.members", "==", "$x.members"),
                     Expect("y.state", "==", "Stable"))),
        Step("Ask X what it believes. The controller removed it from its channel (controllerChannelManager."
             "removeBroker) and sends it nothing; it cannot read ZooKeeper. It leads the partition in its own view, "
             "so it still owns the group: ownedPartitions changes only on onElection / onResignation.",
             "ask_role", {"broker": "$isolated", "topic": OFFSETS, "partition": "$offsets_partition",
                          "label": "zombie"},
             expect=(Expect("zombie.role", "==", "leader", "nobody told it otherwise"),
                     Expect("zombie.leader_epoch", "==", "$offsets_leader_epoch", "in the epoch that ended"))),
        Step("An admin tool commits an offset straight at X, for a group without members whose offsets live in the "
             "same partition. X appends it with acks=all (GroupMetadataManager.appendForGroup), but its followers "
             "fetch from Y now and it cannot shrink its ISR (AlterIsr from a broker the controller counts dead is "
             "refused; Partition.maybeIncrementLeaderHW counts the old ISR): its high watermark is frozen. After "
             "offsets.commit.timeout.ms (5 s) the append times out.",
             "commit_offset", {"broker": "$isolated", "group": "$probe_group", "offset": 7, "label": "zombie-commit"},
             expect=(Expect("zombie-commit.error", "==", "REQUEST_TIMED_OUT",
                            "GroupMetadataManager.storeOffsets passes a timeout on as it is"),
                     Expect("zombie-commit.waited_s", ">=", 4, "offsets.commit.timeout.ms, 5 s"))),
        Step("The next transaction. The producer looks the group coordinator up itself (FindCoordinator, at any "
             "broker: X names itself, the others name Y); a TxnOffsetCommit sent to X times out as above and the "
             "producer asks again, so its offsets end at Y. Y checks the member id and generation (KIP-447, "
             "GroupCoordinator.doTxnCommitOffsets): they match, since Y loaded them. The transaction commits.",
             "transaction", {"label": "second"},
             expect=(Expect("second.outcome", "==", "ok"),
                     Expect("second.from", "==", "$first.next"))),
        Step("Ask both coordinators. Y has the second transaction's offsets. X answers OffsetFetch from memory for a "
             "group it believes it owns (GroupCoordinator.handleFetchOffsets → GroupMetadataManager.getOffsets, "
             "'blindly regardless the current group state'): the first's. require_stable does not help: no commit "
             "is pending in X's memory.",
             "fetch_offsets", {"group": "$group", "at": {"y_now": "$new_coordinator", "x_now": "$isolated"}},
             expect=(Expect("y_now.offset", "==", "$second.next"),
                     Expect("x_now.offset", "==", "$first.next", "the zombie's memory: the old offset"),
                     Expect("x_now.error", "==", "NONE", "no error tells the client it is stale"))),
        Step("The transformer aborts a transaction (the copier's random abort; any abortable error does the same) "
             "and rewinds its consumer: committed() asks the consumer's coordinator — X, where it still heartbeats — "
             "and seeks to the offset X answers.",
             "transaction", {"label": "aborted", "abort": True},
             expect=(Expect("aborted.outcome", "==", "fail", "aborted"),
                     Expect("aborted.rewound_to", "==", "$x_now.offset", "the zombie's answer"),
                     Expect("aborted.rewound_to", "<", "$y_now.offset", "older than what is committed"))),
        Step("The next transaction consumes from there: inputs whose copies are already committed. Its offsets go "
             "to Y, which accepts them (the same member, the same generation), and it commits.",
             "transaction", {"label": "again"},
             expect=(Expect("again.outcome", "==", "ok", "KIP-447's generation check passes"),
                     Expect("again.from", "==", "$aborted.rewound_to"))),
        Step(f"Read '{OUTPUT}' with read_committed, as a consumer downstream of the exactly-once pipeline does.",
             "read_output", {"label": "output"},
             expect=(Expect("output.inputs_twice", ">=", 1, "inputs copied twice, in committed transactions"),
                     Expect("output.first_twice", "==", "$second.from",
                            "the first input the second transaction had committed"),
                     Expect("output.last_twice", "<=", "$second.to",
                            "only inputs already committed are copied again"))),
        Step("Heal the network. X reaches ZooKeeper again, finds its session gone and registers anew; the "
             "controller sends it LeaderAndIsr: follow Y.",
             "heal", {}),
        Step(f"Every replica of the {OFFSETS} partition, X included, applies the leader ZooKeeper names.",
             "wait_for_leader_and_isr", {"topic": OFFSETS, "partition": "$offsets_partition", "timeout_s": 60}),
        Step("X follows now: GroupCoordinator.onResignation unloads the group, and the consumer, answered "
             "NOT_COORDINATOR, finds Y.",
             "ask_role", {"broker": "$isolated", "topic": OFFSETS, "partition": "$offsets_partition",
                          "label": "healed"},
             expect=(Expect("healed.role", "==", "follower"),
                     Expect("healed.leader", "==", "$new_coordinator"))),
        Step("The transformer finishes the input; the output is read back, and the chaos txn checker "
             "(kafkasim chaos run --workload txn) judges the whole history.",
             "finish_transformer", {"label": "final"},
             expect=(Expect("final.inputs_copied", "==", INPUTS, "every input copied"),
                     Expect("final.inputs_twice", "==", "$output.inputs_twice",
                            "the duplicates stay: committed is committed"),
                     Expect("checker.duplicates", "==", 0, "no duplicate the zombie does not explain"),
                     Expect("checker.anomalies", "==", ["txn-zombie-coordinator"]),
                     Expect("checker.verdict", "==", "kafka-known", "Kafka 2.8's own behaviour, not a kafkasim bug"))),
    ),
    next_steps=(
        "Verdict: Kafka 2.8 does the same (docs/zombie-coordinator.md). A coordinator cut off from ZooKeeper keeps",
        "answering for a partition it can no longer write, and a rewind to its offsets re-processes committed input.",
        "Why KIP-447's generation check does not catch it: the new coordinator loaded the very member and generation",
        "the zombie wrote, so the copies' TxnOffsetCommit matches; no producer epoch changed either, so no fencing.",
        "What would close it: a broker that stops answering without a live registration (KRaft's broker fencing).",
        "What to try next:",
        "  kafkasim scenario run zombie-leader       the same cut on a partition leader: acks=all keeps it harmless",
        "  kafkasim chaos run --netns --workload txn --nemesis zk-isolate   the same at random: verdict kafka-known",
        "  kafkasim analyze RUN_FOLDER               the timeline of this run (the folder above)",
    ),
)
