"""The demo: kill -9 the leader of a replicated topic written with acks=all, watch the controller elect a new
leader from the ISR and shrink the ISR, bring the old leader back, and find every acknowledged value."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

SCENARIO = Scenario(
    name="leader-failover",
    title="Leader failover: nothing acknowledged with acks=all is lost",
    summary="Three brokers, topic 'events' with 3 replicas. A producer writes with acks=all, so a value is "
            "acknowledged only once every in-sync replica has it. Then the leader dies without warning.",
    topics=(Topic("events", replicas=3, leader="not-controller"),),
    steps=(
        Step("A producer sends 100 values with acks=all.",
             "produce", {"topic": "events", "count": 100, "acks": "all", "label": "before"},
             expect=(Expect("before.acknowledged", "==", 100, "every in-sync replica has them"),)),
        Step("kill -9 the leader of events-0: no controlled shutdown, no goodbye. ZooKeeper still lists it until "
             "its session expires (zookeeper.session.timeout.ms, 2 s in the classroom profile).",
             "kill9", {"leader_of": "events"},
             remember={"epoch_before": "leader_epoch:events"}),
        Step("Wait for the controller: the broker's znode vanishes, the controller elects a new leader from the "
             "ISR and writes a new leader epoch.",
             "wait_for_leader_change", {"topic": "events", "old": "$killed"},
             expect=(Expect("leader:events", "!=", "$killed", "a dead broker cannot lead"),
                     Expect("leader_epoch:events", ">", "$epoch_before", "every election starts a new leader epoch"),
                     Expect("isr:events", "does not contain", "$killed",
                            "the controller removes a dead replica from the ISR"))),
        Step("The producer goes on: its client finds the new leader in the metadata and sends 100 more.",
             "produce", {"topic": "events", "count": 100, "acks": "all", "label": "after"},
             expect=(Expect("after.acknowledged", "==", 100, "two in-sync replicas are enough for acks=all"),)),
        Step("Bring the old leader back. It returns as a follower, truncates what the new leader does not have, "
             "and catches up.",
             "start", {"broker": "$killed"},
             expect=(Expect("live_brokers", "contains", "$killed"),)),
        Step("Wait until it is back in the ISR (it has fetched up to the leader's log end).",
             "wait_for_isr", {"topic": "events", "size": 3},
             expect=(Expect("isr:events", "contains", "$killed", "a caught-up follower rejoins the ISR"),)),
        Step("Read every replica's log back and look for each acknowledged value.",
             "read_all", {"topics": ["events"]},
             expect=(Expect("acknowledged:events", "==", 200),
                     Expect("lost:events", "==", 0, "acks=all: an acknowledged value is on every in-sync replica"),
                     Expect("replicas_agree:events", "==", True, "followers converge on the leader's log"))),
    ),
    next_steps=(
        "What to try next:",
        "  kafkasim scenario list                              the other classroom stories",
        "  kafkasim scenario run min-insync-replicas --step    one of them, a step at a time (Enter goes on)",
        "  kafkasim up --profile classroom; kafkasim status --watch   a cluster of your own, watched live",
        "  kafkasim dashboard                                  the same, live in a browser, with fault buttons",
        "  kafkasim chaos run --duration 60                    random faults, then the Jepsen-style checker",
        "  kafkasim analyze RUN_FOLDER                         the timeline of this run (the folder above)",
    ),
)
