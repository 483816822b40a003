"""The controller paused (SIGSTOP, a long GC pause): its session expires, another broker wins /controller and bumps
/controller_epoch. Then the fence: the new controller is paused while it holds work, /controller is deleted and a
third controller elected; resumed, the deposed one does that work, and ZooKeeper refuses its write (BADVERSION on
/controller_epoch's zkVersion) while the brokers ignore its requests (STALE_CONTROLLER_EPOCH)."""

from cluster.scenarios.model import Expect, Scenario, Step, Topic

SCENARIO = Scenario(
    name="controller-failover",
    title="Controller failover: a new controller with controller epoch + 1, and the old one fenced",
    summary="Three brokers; topic 't' led by a broker that is not the controller. The controller freezes.",
    topics=(Topic("t", replicas=3, leader="not-controller"),),
    # the deposed controller stays paused while the others elect a new one: that must fit in its session
    overrides={"zookeeper.session.timeout.ms": "6000"},
    steps=(
        Step("Write 20 values with acks=all.",
             "produce", {"topic": "t", "count": 20, "acks": "all", "label": "before"},
             expect=(Expect("before.acknowledged", "==", 20),)),
        Step("Freeze the controller (SIGSTOP, the broker named in /controller), as a long GC pause would.",
             "freeze", {"controller": True},
             remember={"old_controller_epoch": "controller_epoch", "t_leader": "leader:t"}),
        Step("Wait until its session expires: /controller vanishes, every broker tries to create it, one wins.",
             "wait_for_controller_change", {"old": "$frozen"},
             expect=(Expect("controller", "!=", "$frozen", "a broker without a session cannot be controller"),
                     Expect("controller_epoch", "==", "$old_controller_epoch+1",
                            "each new controller increments /controller_epoch"),
                     Expect("leader:t", "==", "$t_leader", "a partition whose leader lives keeps it"))),
        Step("The cluster still takes writes.",
             "produce", {"topic": "t", "count": 20, "acks": "all", "label": "after"},
             expect=(Expect("after.acknowledged", "==", 20),)),
        Step("Pause this controller too, while it has work to do: the frozen broker resumes and registers again, "
             "topic 'u' is created; it holds both watches unread. An operator deletes /controller: a third "
             "controller wins it, bumps /controller_epoch, creates u-0's state and tells every broker. Then it is "
             "resumed (SIGCONT), within its session timeout, still believing it is the controller.",
             "move_controller_while_paused", {"topic": "u", "like": "t", "thaw_broker": "$frozen"},
             expect=(Expect("controller", "!=", "$paused", "the first to create /controller again holds it"),
                     Expect("controller_epoch", "==", "$paused_epoch+1",
                            "the new controller increments /controller_epoch"),
                     Expect("live_brokers", "contains", "$paused", "its session is alive: only paused"))),
        Step("The resumed controller acts on what it held: UpdateMetadata to the brokers for the returned one, then "
             "u-0's state znode, a multi-op whose first op checks /controller_epoch's zkVersion.",
             "wait_for_controller_fenced", {"broker": "$paused", "epoch": "$paused_epoch"},
             expect=(Expect("fenced.write", "contains", "/brokers/topics/u/partitions",
                            "ZooKeeper refused its write whole: BADVERSION on the /controller_epoch check"),
                     Expect("fenced.controller_epoch", "==", "$paused_epoch"),
                     Expect("fenced.expected_zk_version", "==", "$paused_epoch_zk_version",
                            "it expected the zkVersion it was elected at"),
                     Expect("epoch_zk_version", ">", "$paused_epoch_zk_version",
                            "the new controller's election moved it on"),
                     Expect("ignored_requests", "contains", "UpdateMetadata",
                            "a broker that saw the newer controller epoch answers STALE_CONTROLLER_EPOCH"),
                     Expect("ignored.epoch_seen", "==", "$paused_epoch+1"),
                     Expect("resigned", "==", True, "told it was moved, it resigns"))),
        Step("The cluster is the new controller's: its epoch, its state of u-0.",
             "wait_for_leader_and_isr", {"topic": "u"},
             expect=(Expect("controller", "==", "$new_controller", "no election: the deposed one only resigned"),
                     Expect("controller_epoch", "==", "$paused_epoch+1"),
                     Expect("state_controller_epoch:u", "==", "$paused_epoch+1",
                            "u-0's state was written by the new controller only"))),
        Step("Read every replica back.",
             "read_all", {"topics": ["t"]},
             expect=(Expect("lost:t", "==", 0),)),
    ),
)
