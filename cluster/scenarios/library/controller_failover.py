"""kill -9 of the controller: the other brokers race for /controller, one wins and bumps /controller_epoch, so
requests from the dead controller (if it were only paused) would be fenced by their older epoch."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

SCENARIO = Scenario(
    name="controller-failover",
    title="Controller failover: a new controller with controller epoch + 1",
    summary="Three brokers; topic 't' led by a broker that is not the controller. The controller dies.",
    topics=(Topic("t", replicas=3, leader="not-controller"),),
    steps=(
        Step("Write 20 values with acks=all.",
             "produce", {"topic": "t", "count": 20, "acks": "all", "label": "before"},
             expect=(Expect("before.acknowledged", "==", 20),)),
        Step("kill -9 the controller (the broker named in /controller).",
             "kill9", {"controller": True},
             remember={"old_controller_epoch": "controller_epoch", "t_leader": "leader:t"}),
        Step("Wait until its session expires: /controller vanishes, every broker tries to create it, one wins.",
             "wait_for_controller_change", {"old": "$killed"},
             expect=(Expect("controller", "!=", "$killed", "a dead broker cannot be controller"),
                     Expect("controller_epoch", "==", "$old_controller_epoch+1",
                            "each new controller increments /controller_epoch"),
                     Expect("leader:t", "==", "$t_leader", "a partition whose leader lives keeps it"))),
        Step("The cluster still takes writes.",
             "produce", {"topic": "t", "count": 20, "acks": "all", "label": "after"},
             expect=(Expect("after.acknowledged", "==", 20),)),
        Step("Bring the old controller back: /controller is taken, so it returns as an ordinary broker.",
             "start", {"broker": "$killed"},
             expect=(Expect("controller", "!=", "$killed", "the first to create /controller keeps it"),
                     Expect("controller_epoch", "==", "$old_controller_epoch+1", "no new election"))),
        Step("Read every replica back.",
             "read_all", {"topics": ["t"]},
             expect=(Expect("lost:t", "==", 0),)),
    ),
)
