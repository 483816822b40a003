"""The feed tells trace events in words, and follows trace files as they grow."""

from __future__ import annotations

from pathlib import Path

from cluster.dashboard.feed import Feed, TraceFollower, sentence
from traces import events as te
from traces.faults import record_fault


def test_a_session_expiry_is_told_with_the_broker():
    assert sentence(te.BrokerExpired(broker_id=1, expired_broker=3, broker_epoch=40)) == \
        "broker 3's session expired (seen by controller 1)"


def test_an_election_names_controller_leader_partition_and_epoch():
    event = te.LeaderElected(broker_id=1, topic="orders", partition=0, leader=2, leader_epoch=4, isr=[2, 1],
                             previous_leader=3, zk_version=5, election="offline")
    assert sentence(event) == ("controller 1 elected broker 2 leader of orders-0, leader epoch 4, ISR [2,1] after "
                               "its leader went offline")


def test_a_preferred_election_says_the_partition_went_back_to_its_preferred_replica():
    event = te.LeaderElected(broker_id=1, topic="orders", partition=0, leader=3, leader_epoch=6, isr=[2, 3],
                             previous_leader=2, zk_version=7, election="preferred")
    assert sentence(event) == ("controller 1 elected broker 3 leader of orders-0, leader epoch 6, ISR [2,3] (back to "
                               "its preferred replica)")


def test_an_election_without_a_leader_says_the_partition_is_offline():
    event = te.LeaderElected(broker_id=1, topic="orders", partition=0, leader=-1, leader_epoch=5, isr=[3],
                             previous_leader=3, zk_version=6, election="offline")
    assert "no leader for orders-0: it is offline" in sentence(event)


def test_an_isr_shrink_says_who_lagged_and_how_long():
    event = te.IsrChanged(broker_id=2, topic="orders", partition=0, kind="shrink", old_isr=[2, 1, 3], new_isr=[2, 1],
                          leader_epoch=4, zk_version=7,
                          lags=[te.ReplicaLag(replica=3, log_end_offset=10, lag_offsets=5, lag_ms=3000)])
    assert sentence(event) == "ISR of orders-0 shrank to [2,1]: broker 3 lagged 3.0 s"


def test_a_fenced_controller_write_names_the_write_its_epoch_and_the_zk_version_it_expected():
    event = te.ControllerWriteFenced(broker_id=2, controller_epoch=3, operation="TopicChange",
                                     write="create /brokers/topics/u/partitions/0 (+1 more)",
                                     expected_epoch_zk_version=2)
    assert sentence(event) == ("ZooKeeper refused create /brokers/topics/u/partitions/0 (+1 more) of deposed "
                               "controller 2 (controller epoch 3, handling TopicChange): /controller_epoch is no "
                               "longer at zkVersion 2 (BADVERSION), a newer controller exists")


def test_a_request_from_a_deposed_controller_is_told_as_ignored_with_both_epochs():
    event = te.ControlRequestFenced(broker_id=3, request="UpdateMetadata", from_controller=2,
                                    request_controller_epoch=3, highest_controller_epoch_seen=4, partitions=0)
    assert sentence(event) == ("broker 3 ignored UpdateMetadata from controller 2: its controller epoch 3 is older "
                               "than 4, the newest it has seen (STALE_CONTROLLER_EPOCH)")


def test_a_fault_from_the_tools_is_in_the_feed():
    event = te.FaultInjected(broker_id=2, action="sigkill", target="broker 2 (pid 99)")
    assert sentence(event) == "fault: sigkill broker 2 (pid 99)"


def test_a_moved_log_start_says_where_and_how_many_segments_went():
    event = te.LogStartOffsetIncremented(broker_id=2, topic="orders", partition=0, log_start_offset=120,
                                         log_end_offset=300, high_watermark=300, role="follower",
                                         reason="leader_log_start", segments_deleted=3)
    assert sentence(event) == "broker 2 moved the start of orders-0 to offset 120 (follower), 3 segment(s) deleted"


def test_a_controlled_shutdown_attempt_names_the_partitions_it_still_leads_and_what_comes_next():
    retry = te.ControlledShutdownAttempt(broker_id=2, attempt=1, max_attempts=3, controller=1, error_code=0,
                                         remaining=["orders-0"], backoff_ms=500)
    assert sentence(retry) == ("broker 2 controlled shutdown attempt 1/3: it still leads orders-0 (no other live ISR "
                               "member); asks again in 0.5 s")
    last = retry.model_copy(update={"attempt": 3})
    assert sentence(last).endswith("out of attempts: it stops anyway")
    done = te.ControlledShutdownAttempt(broker_id=2, attempt=1, max_attempts=3, controller=1, error_code=0,
                                        remaining=[])
    assert sentence(done) == "broker 2 controlled shutdown attempt 1/3: controller 1 moved every leadership"
    handled = te.ControlledShutdownStep(broker_id=1, phase="handled", remaining_partitions=1, remaining=["orders-0"],
                                        detail="for broker 2")
    assert sentence(handled) == ("controller 1 handled a controlled shutdown for broker 2; still led by it (no other "
                                 "live ISR member): orders-0")
    assert "stops anyway" in sentence(te.ControlledShutdownStep(broker_id=2, phase="failed", detail="after 3 attempts"))


def test_high_rate_events_are_left_out():
    event = te.HighWatermarkUpdated(broker_id=1, topic="t", partition=0, high_watermark=5, log_end_offset=5,
                                    role="leader")
    assert sentence(event) is None


def test_the_follower_reads_only_what_was_appended_and_waits_for_a_whole_line(tmp_path: Path):
    path = tmp_path / "tools-trace.jsonl"
    follower = TraceFollower(path, "tools")
    assert follower.poll() == []
    record_fault(path, "sigkill", "broker 1 (pid 1)", broker_id=1)
    assert [e.action for e in follower.poll()] == ["sigkill"]
    assert follower.poll() == []
    line = te.FaultInjected(broker_id=2, action="sigstop", target="broker 2").model_dump_json()
    with open(path, "a") as out:
        out.write(line[:20])
    assert follower.poll() == []
    with open(path, "a") as out:
        out.write(line[20:] + "\n")
    assert [e.action for e in follower.poll()] == ["sigstop"]


def test_a_replaced_file_is_read_from_its_start(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    follower = TraceFollower(path, "broker 1")
    record_fault(path, "a", "x")
    record_fault(path, "b", "x")
    assert len(follower.poll()) == 2
    path.unlink()
    record_fault(path, "c", "x")
    assert [e.action for e in follower.poll()] == ["c"]


def test_the_feed_merges_sources_in_time_order_and_keeps_the_newest(tmp_path: Path):
    tools, broker = tmp_path / "tools.jsonl", tmp_path / "broker.jsonl"
    with open(broker, "w") as out:
        out.write(te.BrokerRegistered(ts_ms=2.0, broker_id=1, broker_epoch=7, endpoints=[]).model_dump_json() + "\n")
        out.write(te.HighWatermarkUpdated(ts_ms=2.5, broker_id=1, topic="t", partition=0, high_watermark=1,
                                          log_end_offset=1, role="leader").model_dump_json() + "\n")
    with open(tools, "w") as out:
        out.write(te.FaultInjected(ts_ms=1.0, action="start", target="broker 1").model_dump_json() + "\n")
        out.write(te.FaultInjected(ts_ms=3.0, action="sigkill", target="broker 1").model_dump_json() + "\n")
    feed = Feed([TraceFollower(tools, "tools"), TraceFollower(broker, "broker 1")], size=2)
    feed.poll()
    assert [line.text for line in feed.lines] == ["broker 1 registered, broker epoch 7",
                                                  "fault: sigkill broker 1"]


def test_lines_the_feed_does_not_tell_are_skipped_unparsed(tmp_path: Path):
    path = tmp_path / "trace.jsonl"
    with open(path, "w") as out:
        out.write(te.HighWatermarkUpdated(broker_id=1, topic="t", partition=0, high_watermark=1, log_end_offset=1,
                                          role="leader").model_dump_json() + "\n")
        out.write('{"event": "produce_acknowledged", "not": "even valid"}\n')
        out.write(te.BrokerRegistered(broker_id=1, broker_epoch=7, endpoints=[]).model_dump_json() + "\n")
    assert [e.event for e in TraceFollower(path, "broker 1").poll()] == ["broker_registered"]
    assert len(TraceFollower(path, "broker 1", told_only=False).poll()) == 2


def test_a_scenario_step_is_told_with_its_narration_and_prediction_then_its_outcome():
    started = te.ScenarioStep(scenario="leader-failover", step=3, steps=7, narration="kill -9 the leader.",
                              prediction="leader:events != 2 ($killed)")
    assert sentence(started) == ("scenario leader-failover, step 3/7: kill -9 the leader. — Kafka predicts "
                                 "leader:events != 2 ($killed)")
    held = started.model_copy(update={"outcome": "held"})
    assert sentence(held) == "scenario leader-failover, step 3/7: leader:events != 2 ($killed) held"
    missed = started.model_copy(update={"outcome": "did not hold", "detail": "leader:events = 2"})
    assert sentence(missed).endswith("did not hold (leader:events = 2)")
    quiet = te.ScenarioStep(scenario="s", step=1, steps=2, narration="Bring it back.")
    assert sentence(quiet) == "scenario s, step 1/2: Bring it back."


def test_the_feed_follows_scenario_steps_in_the_tools_trace(tmp_path):
    from traces.faults import record
    path = tmp_path / "tools-trace.jsonl"
    feed = Feed([TraceFollower(path, "tools")])
    record(path, te.ScenarioStep(ts_ms=1.0, scenario="s", step=1, steps=1, narration="Go.", prediction="x == 1"))
    [line] = feed.poll()
    assert (line.source, line.kind) == ("tools", "scenario_step") and "Kafka predicts x == 1" in line.text
