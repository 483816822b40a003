"""min.insync.replicas=2 on a 3-replica topic: with both followers dead the ISR is the leader alone, so acks=all
is refused with NOT_ENOUGH_REPLICAS before anything is appended, while acks=1 goes on."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

SCENARIO = Scenario(
    name="min-insync-replicas",
    title="min.insync.replicas: acks=all refuses to write with too few in-sync replicas",
    summary="Topic 'guarded': 3 replicas, min.insync.replicas=2, led by the controller (which stays up). "
            "Both followers die; the ISR shrinks to the leader; acks=all and acks=1 producers get different answers.",
    topics=(Topic("guarded", replicas=3, config={"min.insync.replicas": "2"}, leader="controller"),),
    steps=(
        Step("All three replicas in sync: 20 values with acks=all.",
             "produce", {"topic": "guarded", "count": 20, "acks": "all", "label": "in-sync"},
             expect=(Expect("in-sync.acknowledged", "==", 20),),
             remember={"leader": "leader:guarded"}),
        Step("kill -9 both followers.",
             "kill9", {"followers_of": "guarded"}),
        Step("Wait until ZooKeeper notices (session timeout) and the controller takes them out of the ISR.",
             "wait_for_isr", {"topic": "guarded", "size": 1},
             expect=(Expect("isr:guarded", "==", ["$leader"], "dead replicas leave the ISR"),
                     Expect("leader:guarded", "==", "$leader", "the leader is alive: no election"))),
        Step("acks=all, without retries: the leader checks the ISR size against min.insync.replicas before "
             "appending.",
             "produce", {"topic": "guarded", "count": 5, "acks": "all", "label": "acks-all", "retries": False},
             expect=(Expect("acks-all.acknowledged", "==", 0, "ISR 1 < min.insync.replicas 2"),
                     Expect("acks-all.errors", "==", ["NOT_ENOUGH_REPLICAS"], "refused before the append"))),
        Step("acks=1: min.insync.replicas does not apply, the leader alone acknowledges.",
             "produce", {"topic": "guarded", "count": 5, "acks": 1, "label": "acks-1", "retries": False},
             expect=(Expect("acks-1.acknowledged", "==", 5, "acks=1 waits for the leader only"),)),
        Step("Bring both followers back.",
             "start", {"broker": "$killed"}),
        Step("Wait until they caught up and rejoined the ISR.",
             "wait_for_isr", {"topic": "guarded", "size": 3},
             expect=(Expect("isr:guarded", "has size", 3),)),
        Step("acks=all works again.",
             "produce", {"topic": "guarded", "count": 5, "acks": "all", "label": "in-sync-again"},
             expect=(Expect("in-sync-again.acknowledged", "==", 5, "ISR 3 >= min.insync.replicas 2"),)),
        Step("Read every replica back.",
             "read_all", {"topics": ["guarded"]},
             expect=(Expect("acknowledged:guarded", "==", 30),
                     Expect("lost:guarded", "==", 0, "the leader never died: nothing acknowledged is lost"))),
    ),
)
