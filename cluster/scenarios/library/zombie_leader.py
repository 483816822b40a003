"""The zombie leader (reference 3.10): a partition leader cut off from ZooKeeper while clients and the other
brokers still reach it. Its session expires, the controller elects another leader in a new leader epoch and tells
the brokers it can reach (the zombie, dead to it, hears nothing), so the zombie goes on believing it leads. What
keeps it harmless is acks=all with min.insync.replicas=2: its followers now fetch from the new leader, so nothing
it takes is ever replicated, and it cannot shrink its ISR (that is a ZooKeeper write). Healed, it finds its
session gone, registers again, and the controller makes it a follower: it truncates what it wrote as a zombie.

Needs root: every process runs in a network namespace of its own (``kafkasim up --netns``), so that only the
leader's link to ZooKeeper is cut."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

TOPIC = "zombie"
REFUSALS = ["REQUEST_TIMED_OUT", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "NO ANSWER"]

SCENARIO = Scenario(
    name="zombie-leader",
    title="The zombie leader: cut off from ZooKeeper, it believes it leads, but acks=all keeps it harmless",
    summary="Three brokers in network namespaces; topic 'zombie' with 3 replicas and min.insync.replicas=2, led by "
            "a broker that is not the controller. That leader loses ZooKeeper, and only ZooKeeper.",
    netns=True,
    topics=(Topic(TOPIC, replicas=3, leader="not-controller", config={"min.insync.replicas": "2"}),),
    steps=(
        Step("20 values with acks=all: every replica has them.",
             "produce", {"topic": TOPIC, "count": 20, "acks": "all", "label": "before"},
             expect=(Expect("before.acknowledged", "==", 20),)),
        Step("Cut the leader off from ZooKeeper: its namespace drops every packet to and from ZooKeeper's address. "
             "Clients and the other brokers still reach it, and it them.",
             "isolate", {"leader_of": TOPIC, "peers": "zookeeper"},
             remember={"epoch_before": "leader_epoch:zombie"}),
        Step("Its heartbeats no longer arrive: after zookeeper.session.timeout.ms (2 s) ZooKeeper expires its "
             "session and deletes its /brokers/ids znode; the controller elects a leader from the rest of the ISR.",
             "wait_for_leader_change", {"topic": TOPIC, "old": "$isolated"},
             expect=(Expect("leader:zombie", "!=", "$isolated", "to ZooKeeper the broker is dead"),
                     Expect("leader_epoch:zombie", "==", "$epoch_before+1", "an election: a new leader epoch"),
                     Expect("isr:zombie", "does not contain", "$isolated",
                            "the controller removes a dead replica from the ISR"))),
        Step("The controller sends LeaderAndIsr to the brokers it knows are alive: the new leader leads, the other "
             "follower fetches from it now.",
             "wait_for_leader_and_isr", {"topic": TOPIC, "without": "$isolated"}),
        Step("Ask the zombie what it believes. Nobody told it anything: the controller sends nothing to a broker "
             "whose session expired, and it cannot read ZooKeeper.",
             "ask_role", {"broker": "$isolated", "topic": TOPIC, "label": "zombie"},
             expect=(Expect("zombie.role", "==", "leader", "it still believes it leads"),
                     Expect("zombie.leader_epoch", "==", "$epoch_before", "in the epoch that ended"))),
        Step("A client whose metadata is old sends the zombie a value with acks=all (request timeout 3 s). The "
             "zombie appends it and waits for its ISR, but no follower fetches from it any more, and shrinking "
             "its ISR to meet min.insync.replicas would be a ZooKeeper write it cannot make.",
             "produce_to", {"broker": "$isolated", "topic": TOPIC, "value": "zombie-write", "acks": "all",
                            "timeout_ms": 3000, "label": "zombie-write"},
             expect=(Expect("zombie-write.acknowledged", "==", 0, "acks=all: a zombie cannot acknowledge alone"),
                     Expect("zombie-write.error", "is one of", REFUSALS,
                            "it times out waiting for followers, or refuses below min.insync.replicas"))),
        Step("Meanwhile the new leader takes 5 values with acks=all: its ISR of two meets min.insync.replicas=2.",
             "produce_each", {"topic": TOPIC, "values": [f"after-{i}" for i in range(5)], "acks": "all",
                              "label": "after"},
             expect=(Expect("after.acknowledged", "==", 5),)),
        Step("Heal the network. The zombie reaches ZooKeeper again and learns its session expired: it registers "
             "anew, and the controller sends it LeaderAndIsr: follow the new leader, in the new epoch.",
             "heal", {}),
        Step("It asks the new leader where its old epoch ended (KIP-101), truncates the value it took as a zombie, "
             "fetches what it missed and rejoins the ISR.",
             "wait_for_isr", {"topic": TOPIC, "size": 3},
             expect=(Expect("isr:zombie", "contains", "$isolated", "a caught-up follower rejoins"),
                     Expect("leader:zombie", "!=", "$isolated", "it returns as a follower"),
                     Expect("truncations:zombie", "==", 1, "the zombie's own write diverges: it is cut"))),
        Step("Read every replica.",
             "read_all", {"topics": [TOPIC]},
             expect=(Expect("acknowledged:zombie", "==", 25),
                     Expect("lost:zombie", "==", 0, "acks=all: nothing acknowledged is lost"),
                     Expect("replicas_agree:zombie", "==", True, "the zombie's write survives nowhere"))),
    ),
)
