"""``kafkasim groups`` and ``kafkasim groups describe GROUP``: consumer groups as the brokers' coordinators
see them, asked through the Kafka protocol with confluent-kafka's AdminClient (ListGroups, DescribeGroups,
OffsetFetch, ListOffsets), like kafka-consumer-groups.sh. Lag is the high watermark minus the committed
offset."""

from __future__ import annotations

import sys

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cluster.processes import ClusterError

TIMEOUT_S = 15
# confluent-kafka's ConsumerGroupState names, shown with Kafka's own state names
STATE_NAMES = {"PREPARING_REBALANCING": "PreparingRebalance", "COMPLETING_REBALANCING": "CompletingRebalance",
               "STABLE": "Stable", "DEAD": "Dead", "EMPTY": "Empty", "UNKNOWN": "Unknown"}


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _table(header: list[str], rows: list[list[object]]) -> Table:
    # plain columns, like kafka-consumer-groups.sh: easy to read and to grep or cut
    table = Table(*header, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*(Text(str(cell)) for cell in row))  # names are data, never rich markup
    return table


def _print(renderable: object) -> None:
    # piped output is never wrapped: a member id cut in two is worse than a long line
    console = Console() if sys.stdout.isatty() else Console(width=100_000)
    console.print(renderable)


def list_groups(bootstrap: str) -> int:
    admin = _admin(bootstrap)  # held until the answer is in: a collected client abandons its requests
    try:
        result = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    except KafkaException as exc:
        raise ClusterError(f"listing groups failed: {exc.args[0]}; is the cluster up (`kafkasim status`)?") from None
    for error in result.errors:
        print(f"warning: a broker did not answer ListGroups: {error}", file=sys.stderr)
    listed = sorted(result.valid, key=lambda g: g.group_id)
    if not listed:
        print("no consumer groups")
        return 0
    # ListGroups up to v2 carries no state: DescribeGroups (to each group's coordinator) has it
    futures = admin.describe_consumer_groups([g.group_id for g in listed], request_timeout=TIMEOUT_S)
    rows = []
    for g in listed:
        try:
            d = futures[g.group_id].result(TIMEOUT_S)
            state, members = STATE_NAMES.get(d.state.name, d.state.name), len(d.members)
            protocol, coordinator = d.partition_assignor or "-", d.coordinator.id if d.coordinator else "-"
        except KafkaException as exc:
            state, members, protocol, coordinator = f"? ({exc.args[0].name()})", "-", "-", "-"
        rows.append([g.group_id, state, members, protocol, coordinator,
                     "simple" if g.is_simple_consumer_group else "consumer"])
    _print(_table(["GROUP", "STATE", "MEMBERS", "PROTOCOL", "COORDINATOR", "TYPE"], rows))
    return 0


def _offsets_and_ends(admin: AdminClient, group: str, description, timeout_s: float
                      ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], str], dict[tuple[str, int], int]]:
    """The group's committed offsets, the owner of each assigned partition, and each partition's high watermark."""
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                  request_timeout=timeout_s)[group].result(timeout_s)
    offsets = {(tp.topic, tp.partition): tp.offset for tp in committed.topic_partitions if tp.offset >= 0}
    owners: dict[tuple[str, int], str] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions if member.assignment else []:
            owners[(tp.topic, tp.partition)] = member.member_id
    ends: dict[tuple[str, int], int] = {}
    partitions = sorted(set(offsets) | set(owners))
    if partitions:
        wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}
        for tp, future in admin.list_offsets(wanted, request_timeout=timeout_s).items():
            try:
                ends[(tp.topic, tp.partition)] = future.result(timeout_s).offset
            except KafkaException:
                pass  # partition without a leader right now: its lag shows as "-"
    return offsets, owners, ends


def groups_overview(bootstrap: str, timeout_s: float = 2.0, admin: AdminClient | None = None) -> list[dict]:
    """Every group with its state, members and lag per partition, as data (the dashboard's view). A group whose
    coordinator does not answer in time has its error instead."""
    admin = admin or _admin(bootstrap)
    listed = sorted(admin.list_consumer_groups(request_timeout=timeout_s).result(timeout_s).valid,
                    key=lambda g: g.group_id)
    if not listed:
        return []
    futures = admin.describe_consumer_groups([g.group_id for g in listed], request_timeout=timeout_s)
    overview = []
    for g in listed:
        try:
            d = futures[g.group_id].result(timeout_s)
            offsets, owners, ends = _offsets_and_ends(admin, g.group_id, d, timeout_s)
        except KafkaException as exc:
            overview.append({"group": g.group_id, "error": exc.args[0].name()})
            continue
        partitions = []
        for tp in sorted(set(offsets) | set(owners)):
            committed, end = offsets.get(tp), ends.get(tp)
            partitions.append({"topic": tp[0], "partition": tp[1], "committed": committed, "high_watermark": end,
                               "lag": end - committed if committed is not None and end is not None else None,
                               "owner": owners.get(tp)})
        overview.append({
            "group": g.group_id, "state": STATE_NAMES.get(d.state.name, d.state.name),
            "coordinator": d.coordinator.id if d.coordinator is not None else None,
            "protocol": d.partition_assignor or None,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                         "host": m.host} for m in d.members],
            "partitions": partitions,
            "lag": sum(p["lag"] for p in partitions if p["lag"] is not None),
        })
    return overview


def describe_group(bootstrap: str, group: str) -> int:
    admin = _admin(bootstrap)
    try:
        description = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
        offsets, owners, ends = _offsets_and_ends(admin, group, description, TIMEOUT_S)
    except KafkaException as exc:
        raise ClusterError(f"describing group {group!r} failed: {exc.args[0]}") from None
    if description.state.name == "DEAD" and not offsets:
        raise ClusterError(f"consumer group {group!r} does not exist; `kafkasim groups` lists the groups")
    partitions = sorted(set(offsets) | set(owners))
    coordinator = description.coordinator.id if description.coordinator is not None else "-"
    print(f"group {group}: {STATE_NAMES.get(description.state.name, description.state.name)}, protocol "
          f"{description.partition_assignor or '-'}, coordinator broker {coordinator}, "
          f"{len(description.members)} members")
    if description.members:
        print()
        # INSTANCE: a static member's group.instance.id (KIP-345), "-" for a dynamic one
        _print(_table(["MEMBER", "INSTANCE", "CLIENT", "HOST", "PARTITIONS"], [
            [m.member_id, m.group_instance_id or "-", m.client_id, m.host or "-",
             ", ".join(f"{tp.topic}-{tp.partition}" for tp in (m.assignment.topic_partitions if m.assignment
                                                                else [])) or "-"]
            for m in description.members]))
    print()
    rows = []
    for tp in partitions:
        committed_offset, end = offsets.get(tp), ends.get(tp)
        lag = end - committed_offset if committed_offset is not None and end is not None else "-"
        rows.append([tp[0], tp[1], committed_offset if committed_offset is not None else "-",
                     end if end is not None else "-", lag, owners.get(tp, "-")])
    _print(_table(["TOPIC", "PARTITION", "COMMITTED", "HIGH-WATERMARK", "LAG", "OWNER"], rows) if rows
           else "no committed offsets and no assigned partitions")
    return 0


def delete_groups(bootstrap: str, groups: list[str]) -> int:
    """DeleteGroups at each group's coordinator (confluent-kafka's delete_consumer_groups), like
    kafka-consumer-groups.sh --delete --group G: a group without members goes with its committed offsets. Returns 0
    when every group was deleted, 1 otherwise."""
    admin = _admin(bootstrap)
    try:
        futures = admin.delete_consumer_groups(list(dict.fromkeys(groups)), request_timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise ClusterError(f"DeleteGroups failed: {exc.args[0]}; is the cluster up (`kafkasim status`)?") from None
    failed = 0
    for group in dict.fromkeys(groups):
        try:
            futures[group].result(TIMEOUT_S)
            print(f"deleted group {group}")
        except KafkaException as exc:
            failed += 1
            error = exc.args[0]
            advice = {"NON_EMPTY_GROUP": ": it has members; stop its consumers first",
                      "GROUP_ID_NOT_FOUND": ": no such group; `kafkasim groups` lists them"}.get(error.name(), "")
            print(f"group {group} not deleted: {error.name()}{advice}", file=sys.stderr)
    return 1 if failed else 0
