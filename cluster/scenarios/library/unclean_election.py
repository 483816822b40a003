"""Unclean leader election (reference 3.10, story 5): with unclean.leader.election.enable=true an out-of-sync
replica may lead, and values acknowledged with acks=all are gone; with it false (Kafka's default) the partition
stays offline instead, keeping its last ISR, until that replica returns. Leader epochs still make the logs agree.

Two brokers and two topics on the same replicas [A, B]: ``gamble`` allows unclean election (a topic config),
``careful`` keeps the default. B dies and leaves the ISR; five more values are acknowledged by A alone (committed:
the ISR is [A] and min.insync.replicas is 1); A dies; B comes back first."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

GAMBLE, CAREFUL = "gamble", "careful"

SCENARIO = Scenario(
    name="unclean-election",
    title="Unclean leader election: availability bought with acknowledged writes",
    summary="Two brokers; topics 'gamble' (unclean.leader.election.enable=true) and 'careful' (the default, "
            "false), both on replicas [A, B], A leading. Kafka lets an out-of-sync replica lead only if the topic "
            "says so; then what only the old ISR had is lost.",
    brokers=2,
    # 17 steps: at the default 2 s the pauses alone were 32 s of a --auto run; --step is the pace to teach it at
    pause_s=1.0,
    topics=(Topic(GAMBLE, replicas=2, leader="controller", config={"unclean.leader.election.enable": "true"}),
            Topic(CAREFUL, replicas=2, same_replicas_as=GAMBLE)),
    steps=(
        Step("5 values to each topic with acks=all: both replicas have them.",
             "produce", {"topic": GAMBLE, "count": 5, "acks": "all", "label": "replicated"},
             expect=(Expect("replicated.acknowledged", "==", 5),)),
        Step("The same 5 to 'careful'.",
             "produce", {"topic": CAREFUL, "count": 5, "acks": "all", "label": "replicated"},
             expect=(Expect("replicated.acknowledged", "==", 5),),
             remember={"a": "leader:gamble"}),
        Step("kill -9 B, the follower. When its ZooKeeper session expires the controller drops it from both ISRs.",
             "kill9", {"followers_of": GAMBLE}),
        Step("Wait until the ISR of 'gamble' is [A].",
             "wait_for_isr", {"topic": GAMBLE, "size": 1, "without": "$killed"},
             expect=(Expect("isr:gamble", "==", ["$a"], "a dead follower leaves the ISR"),)),
        Step("And that of 'careful'.",
             "wait_for_isr", {"topic": CAREFUL, "size": 1, "without": "$killed"},
             expect=(Expect("isr:careful", "==", ["$a"]),)),
        Step("5 more values to 'gamble' with acks=all. The ISR is [A] and min.insync.replicas is 1: A alone "
             "acknowledges them. They are committed; B never saw them.",
             "produce", {"topic": GAMBLE, "count": 5, "acks": "all", "label": "committed"},
             expect=(Expect("committed.acknowledged", "==", 5, "acks=all waits for the ISR, which is only A"),)),
        Step("The same to 'careful'.",
             "produce", {"topic": CAREFUL, "count": 5, "acks": "all", "label": "committed"},
             expect=(Expect("committed.acknowledged", "==", 5),),
             remember={"b": "killed", "epoch_before": "leader_epoch:gamble"}),
        Step("kill -9 A too. Both replicas are down.",
             "kill9", {"leader_of": GAMBLE}),
        Step("Bring B back first, the replica that is out of sync.",
             "start", {"broker": "$b"}),
        Step("'gamble' allows unclean election: the controller makes B leader although it is not in the ISR.",
             "wait_for_leader", {"topic": GAMBLE, "leader": "$b"},
             expect=(Expect("leader:gamble", "==", "$b", "unclean.leader.election.enable=true: any live replica"),
                     Expect("isr:gamble", "==", ["$b"], "the new leader's ISR is itself"),
                     Expect("leader_epoch:gamble", "==", "$epoch_before+1", "an election: a new leader epoch"))),
        Step("'careful' keeps the default: no replica of its ISR [A] is alive, so it has no leader at all.",
             "wait_for_leader", {"topic": CAREFUL, "leader": -1},
             expect=(Expect("leader:careful", "==", -1, "unclean.leader.election.enable=false: offline"),
                     Expect("isr:careful", "==", ["$killed"], "the ISR is never emptied: it waits for A"))),
        Step("B takes a new value on 'gamble', at offset 5, where A had the committed ones.",
             "produce", {"topic": GAMBLE, "count": 1, "acks": "all", "label": "unclean"},
             expect=(Expect("unclean.acknowledged", "==", 1),)),
        Step("Read B's log: the five committed values are not there.",
             "read_all", {"topics": [GAMBLE]},
             expect=(Expect("lost:gamble", "==", 5, "B never had them, and now B leads"),)),
        Step("Bring A back.",
             "start", {"broker": "$killed"}),
        Step("On 'gamble' A follows B: it asks B where its epoch ends (offset 5), truncates its committed five, "
             "fetches B's value and rejoins the ISR.",
             "wait_for_isr", {"topic": GAMBLE, "size": 2},
             expect=(Expect("truncations:gamble", "==", 1, "A cut offsets 5..9, which B never had"),)),
        Step("On 'careful' A, its last ISR member, leads again with everything, and B catches up.",
             "wait_for_isr", {"topic": CAREFUL, "size": 2},
             expect=(Expect("leader:careful", "==", "$killed", "the last replica of the ISR is the clean choice"),)),
        Step("Read every replica of both topics.",
             "read_all", {"topics": [GAMBLE, CAREFUL]},
             expect=(Expect("lost:gamble", "==", 5, "the acknowledged values are gone from every replica"),
                     Expect("replicas_agree:gamble", "==", True, "leader epochs make the logs converge"),
                     Expect("lost:careful", "==", 0, "waiting for A lost nothing"),
                     Expect("replicas_agree:careful", "==", True))),
    ),
)
