"""Kafka's TopicDeletionManager, pure: which requested deletions can go ahead now.

A topic is deleted only when every broker holding one of its replicas is live, so that each replica
hears its StopReplica(delete), and none of its partitions is being reassigned; until then the request waits in
/admin/delete_topics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.context import ControllerContext


@dataclass
class TopicDeletionDecision:
    unknown: list[str] = field(default_factory=list)           # requested but not a topic: the request goes
    ready: list[str] = field(default_factory=list)             # every replica live: delete now
    waiting: dict[str, list[int]] = field(default_factory=dict)  # topic -> brokers it waits for
    to_delete: set[str] = field(default_factory=set)            # what the controller keeps as being deleted


def decide_topic_deletion(ctx: ControllerContext, requested: list[str], delete_topic_enable: bool
                          ) -> TopicDeletionDecision:
    decision = TopicDeletionDecision()
    if not delete_topic_enable:
        decision.unknown = list(requested)  # delete.topic.enable=false: every request is dropped
        return decision
    decision.unknown = [t for t in requested if t not in ctx.assignments]
    decision.to_delete = {t for t in requested if t in ctx.assignments}
    for topic in sorted(decision.to_delete):
        replicas = {r for p in ctx.assignments[topic] for r in ctx.replicas((topic, p))}
        missing = sorted(replicas - set(ctx.live_brokers))
        if ctx.topic_reassigning(topic):
            # Kafka marks a topic being reassigned ineligible for deletion until the reassignment completes
            decision.waiting[topic] = missing
        elif missing:
            decision.waiting[topic] = missing
        else:
            decision.ready.append(topic)
    return decision
