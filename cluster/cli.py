"""The ``kafkasim`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import broker.__main__ as broker_entry
from broker.config import PROFILES

from cluster.bench import command as bench_command
from cluster.dashboard import command as dashboard_command
from cluster.net.system import NotRootError
from cluster.partition_health import REPORTS
from cluster.processes import ClusterError, ClusterLayout, ClusterSpec, default_data_dir

SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT}


def _key_values(items: list[str] | None, option: str) -> dict[str, str]:
    result = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClusterError(f"{option} takes key=value, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {text}")
    return value


DATA_DIR_HELP = "the cluster's folder (default: $KAFKASIM_DATA_DIR or ./kafkasim-data)"


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: it accepts the global options too, as Kafka's tools take theirs anywhere.

    Its copy defaults to SUPPRESS so that an option given before the subcommand is not reset by it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS, help=DATA_DIR_HELP)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkasim", description=(
        "A replicated, Kafka-compatible broker cluster coordinated by a real ZooKeeper."))
    parser.add_argument("--data-dir", type=Path, default=None, help=DATA_DIR_HELP)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)

    zk = sub.add_parser("zookeeper", help="run a local ZooKeeper server in the foreground")
    zk.add_argument("--port", type=int, default=2181, help="client port (0: any free port)")
    zk.add_argument("--tick-time", type=int, default=200, help="tickTime in ms (sessions: 2 to 300 ticks)")

    broker = sub.add_parser("broker", help="run one broker in the foreground")
    broker_entry.add_arguments(broker)

    up = sub.add_parser("up", help="start ZooKeeper and a cluster of brokers in the background")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="use an external ZooKeeper ensemble")
    up.add_argument("--zookeeper-port", type=int, default=0, help="port of the local ZooKeeper (0: any free)")
    up.add_argument("--tick-time", type=int, default=200, help="local ZooKeeper tickTime in ms")
    up.add_argument("--base-port", type=int, default=9092,
                    help="first client port; brokers use base, base+1, ..., base+100, ... for the cluster "
                         "plane and base+200, ... for Prometheus metrics (0: any free ports)")
    up.add_argument("--profile", default="kafka", help="kafka (Kafka's defaults) or classroom (short timeouts)")
    up.add_argument("--override", action="append", metavar="KEY=VALUE", help="broker property for every broker")
    up.add_argument("--netns", action="store_true",
                    help="root only: ZooKeeper and each broker in a Linux network namespace of its own, on a bridge "
                         "kafkasim creates, so 'kafkasim net' can cut and slow links one by one; brokers advertise "
                         "their namespace address, which clients on the host reach")
    up.add_argument("--subnet", default=None, metavar="CIDR",
                    help="with --netns: the IPv4 subnet to lay out (default 10.77.0.0/24): host .1, ZooKeeper .2, "
                         "broker N at .(10+N)")
    up.add_argument("--log-dir-size-mib", type=_positive_int, default=None, metavar="N",
                    help="mount an N MiB tmpfs on each broker's log directory (root only), for `kafkasim fill`")

    sub.add_parser("down", help="stop the cluster's brokers (controlled shutdown) and its ZooKeeper")

    fill = sub.add_parser("fill", help="fill a broker's log directory until the disk is full (the disk-full fault; "
                                       "needs `up --log-dir-size-mib N`)")
    fill.add_argument("broker_id", type=int)
    fill.add_argument("--free", action="store_true", help="delete the filler again")

    status = sub.add_parser("status", help="controller, brokers and every partition, read from ZooKeeper")
    status.add_argument("--json", action="store_true")
    status.add_argument("--watch", action="store_true",
                        help="redraw the tables in place as the cluster changes (Ctrl-C to stop)")
    status.add_argument("--interval", type=float, default=0.5, metavar="S",
                        help="with --watch: seconds between reads of ZooKeeper (default 0.5)")

    topic = sub.add_parser("topic", help="create, describe, alter or delete topics")
    topic_sub = topic.add_subparsers(dest="topic_command", required=True)
    create = topic_sub.add_parser("create")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config, repeatable")
    describe = topic_sub.add_parser("describe")
    describe.add_argument("name", nargs="?")
    describe.add_argument("--json", action="store_true")
    reports = describe.add_mutually_exclusive_group()
    for report, what in zip(REPORTS, ("fewer in-sync replicas than assigned ones",
                                      "no leader, or a leader that is not a live broker",
                                      "fewer in-sync replicas than min.insync.replicas, or no leader",
                                      "exactly min.insync.replicas in sync: one more loss stops acks=all"),
                            strict=True):
        reports.add_argument(f"--{report}", dest="report", action="store_const", const=report,
                             help=f"only partitions with {what}")
    alter = topic_sub.add_parser("alter", help="add partitions (kafka-topics.sh --alter --partitions), placed by "
                                                "Kafka's rule; the controller brings them online")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, required=True, metavar="N", help="the new, larger, total count")
    delete = topic_sub.add_parser("delete")
    delete.add_argument("name")

    groups = sub.add_parser("groups", help="list consumer groups; `groups describe GROUP` for members and lag")
    groups_sub = groups.add_subparsers(dest="groups_command")
    groups_sub.add_parser("describe", help="members, assignments, committed offsets and lag per partition"
                          ).add_argument("group")
    groups_sub.add_parser("delete", help="delete groups without members, and their committed offsets (DeleteGroups)"
                          ).add_argument("group", nargs="+")

    records = sub.add_parser("records", help="`records delete`: delete a partition's records below an offset")
    records_sub = records.add_subparsers(dest="records_command", required=True)
    delete_records = records_sub.add_parser(
        "delete", help="move partitions' log start offsets forward through DeleteRecords (kafka-delete-records.sh)",
        description="Asks each partition's leader (DeleteRecords, confluent-kafka's AdminClient) to delete the "
                    "records below the offset: consumers can no longer read them, and the segment files wholly "
                    "below it go from every replica's disk. Prints each partition's new low watermark.")
    delete_records.add_argument("--topic", default=None)
    delete_records.add_argument("--partition", type=int, default=None, help="default 0")
    delete_records.add_argument("--offset", type=int, default=None, help="the new first offset; -1: the high watermark")
    delete_records.add_argument("--offset-json-file", type=Path, default=None, metavar="FILE",
                                help='Kafka\'s format: {"partitions": [{"topic": "t", "partition": 0, "offset": 10}], '
                                     '"version": 1}')

    config = sub.add_parser("config", help="a topic's or a broker's dynamic configuration: describe, set, delete "
                                           "(live, no restart)",
                            description="Describes or changes a topic's, a broker's or the cluster-wide broker "
                                        "default's configuration through the Kafka protocol (DescribeConfigs, "
                                        "IncrementalAlterConfigs with confluent-kafka's AdminClient), like "
                                        "kafka-configs.sh --bootstrap-server. Every broker concerned applies a change "
                                        "at once, without a restart.")
    _config_entity(config)
    config.add_argument("--describe", action="store_true", help="every config with its value and source")
    config.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a config, e.g. --set min.insync.replicas=2 (repeatable)")
    config.add_argument("--delete", action="append", default=[], metavar="NAME",
                        help="remove an override: the broker default applies again (repeatable)")
    # the same as words: `kafkasim config describe --topic T`, `config set --topic T NAME=VALUE ...`,
    # `config delete --broker 1 NAME ...`
    config_words = config.add_subparsers(dest="config_action", metavar="{describe,set,delete}",
                                         parser_class=_CommandParser)
    for word, summary, items in (("describe", "every config with its value and source", None),
                                 ("set", "override configs", "NAME=VALUE"),
                                 ("delete", "remove overrides: the broker default applies again", "NAME")):
        action = config_words.add_parser(word, help=summary, description=summary)
        _config_entity(action)
        if items:
            action.add_argument("items", nargs="+", metavar=items)

    leaders = sub.add_parser("leaders", help="leader elections: `leaders elect` gives partitions back to their "
                                             "preferred replicas")
    leaders_sub = leaders.add_subparsers(dest="leaders_command", required=True)
    elect = leaders_sub.add_parser("elect", help="preferred (or --unclean) leader election through ElectLeaders",
                                   description="Asks the controller (ElectLeaders, confluent-kafka's AdminClient) to "
                                               "make each partition's preferred replica, the first of its "
                                               "assignment, its leader again, if it is alive and in the ISR. "
                                               "Without --topic: every partition.")
    elect.add_argument("--topic", default=None)
    elect.add_argument("--partition", type=int, default=None, help="with --topic: only this partition")
    elect.add_argument("--unclean", action="store_true",
                       help="elect partitions without a live leader, from replicas out of the ISR if need be "
                            "(acknowledged writes can be lost)")

    reassign = sub.add_parser("reassign", help="move a partition to other brokers (KIP-455), follow or cancel it",
                              description="Asks the controller (AlterPartitionReassignments, kafka-python's "
                                          "KafkaAdminClient) to move a partition's replicas to the brokers given; "
                                          "the new replicas copy the log, join the ISR, then the old ones are "
                                          "deleted. --status lists the reassignments in progress.")
    reassign.add_argument("partition", nargs="?", metavar="TOPIC/PARTITION")
    reassign.add_argument("--replicas", metavar="B1,B2,...", help="the target replicas, preferred leader first")
    reassign.add_argument("--cancel", action="store_true", help="cancel the partition's reassignment in progress")
    reassign.add_argument("--status", action="store_true", help="list the reassignments in progress")
    reassign.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT,...",
                          help="the brokers to ask first (default: every broker of the cluster in --data-dir)")

    kill = sub.add_parser("kill", help="send a signal to a broker: by id, the controller, or a partition's leader")
    target = kill.add_mutually_exclusive_group(required=True)
    target.add_argument("broker_id", nargs="?", type=int)
    target.add_argument("--controller", action="store_true")
    target.add_argument("--leader-of", metavar="TOPIC/PARTITION")
    target.add_argument("--zookeeper", action="store_true",
                        help="the cluster's own ZooKeeper (the zk-down fault; `start --zookeeper` brings it back)")
    kill.add_argument("--signal", default="KILL", choices=sorted(SIGNALS))
    _docker_options(kill)

    start = sub.add_parser("start", help="start a stopped broker, or the cluster's ZooKeeper, again")
    start_target = start.add_mutually_exclusive_group(required=True)
    start_target.add_argument("broker_id", nargs="?", type=int)
    start_target.add_argument("--zookeeper", action="store_true", help="the cluster's own ZooKeeper, with its data")
    _docker_options(start)

    for name, action in (("pause", "freeze a broker's container (docker pause)"),
                         ("unpause", "let a paused broker's container run again"),
                         ("disconnect", "cut a broker's container off the compose network"),
                         ("connect", "put a disconnected broker's container back on the compose network")):
        fault = sub.add_parser(name, help=f"{action}; needs --docker")
        fault_target = fault.add_mutually_exclusive_group(required=True)
        fault_target.add_argument("broker_id", nargs="?", type=int)
        fault_target.add_argument("--controller", action="store_true")
        fault_target.add_argument("--leader-of", metavar="TOPIC/PARTITION")
        _docker_options(fault)

    _net_parser(sub)

    traces = sub.add_parser("traces", help="gather a run's traces, workload histories and final logs")
    traces_sub = traces.add_subparsers(dest="traces_command", required=True)
    collect = traces_sub.add_parser("collect", help="copy everything the analysis reads into one folder")
    collect.add_argument("--out", type=Path, default=None,
                         help="an empty or new folder (default: DATA_DIR/runs/run-<UTC time>)")
    _docker_options(collect)

    analyze = sub.add_parser("analyze", help="run the replication analysis (PySpark) on a collected run",
                             description="Writes timeline, follower-lag and failover-phase figures (PNG), the "
                                         "tables as CSV and summary.txt into RUN_DIR/analysis (or --out).")
    analyze.add_argument("run_dir", type=Path, help="a folder written by `kafkasim traces collect`")
    analyze.add_argument("--out", type=Path, default=None)
    analyze.add_argument("--master", default=None,
                         help="Spark master URL (default: $KAFKASIM_SPARK_MASTER or local[2])")
    analyze.add_argument("--history", type=Path, action="append", default=None,
                         help="a workload history (*history.jsonl) not in the run folder; repeatable")
    analyze.add_argument("--include-internal", action="store_true",
                         help="let internal topics (__consumer_offsets) lead the figures too; by default the "
                              "figures show the partitions of your topics where something happened")

    from cluster.chaos.command import add_parser as add_chaos_parser

    add_chaos_parser(sub)
    bench_command.add_parser(sub)
    dashboard_command.add_parser(sub)
    from cluster.scenarios.command import add_parser as add_scenario_parser

    add_scenario_parser(sub)
    return parser


NET_DESCRIPTION = """\
Network faults on a cluster started with 'kafkasim up --netns' (as root). Each process lives in its own network
namespace; a cut is a 'table inet kafkasim' in a namespace that drops packets to and from the peers cut off (no
reset: connections hang until their timeouts, as with a broken link). Faults add up until 'kafkasim net heal'.
Every action is written to the tools' trace (tools-trace.jsonl) before it is made.

With --docker, isolate, partition, slow, heal and status act on the docker-compose cluster: the same tables,
made inside each container's network namespace (nsenter from the host when run as root beside the engine, else
a short-lived helper container of the kafkasim image with NET_ADMIN), with the peers' addresses on the compose
network; "clients" there is the network's gateway, through which the host reaches the published ports.
'isolate BROKER --from all --docker' disconnects the container from the compose network instead; heal removes
every kafkasim table and netem qdisc and reconnects it. 'slow --docker' needs netem in the engine's kernel,
like 'slow' itself; 'clean' has no --docker form (heal, or 'docker compose down -v')."""


def _net_parser(sub: argparse._SubParsersAction) -> None:
    net = sub.add_parser("net", help="cut, partition, slow and heal the links of a --netns or compose cluster",
                         description=NET_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    net_sub = net.add_subparsers(dest="net_command", required=True, parser_class=_CommandParser)
    isolate = net_sub.add_parser("isolate", help="cut one broker off ZooKeeper, the other brokers, clients or all",
                                 description="zookeeper: its session expires and the controller moves its "
                                             "leaderships, while clients still reach it (a zombie leader); "
                                             "brokers: its followers fall out of the ISR; clients: only the host "
                                             "(where clients and tools run) loses it; all: every one of them.")
    isolate.add_argument("broker_id", type=int)
    isolate.add_argument("--from", dest="peers", required=True, choices=["zookeeper", "brokers", "clients", "all"])
    _docker_options(isolate)
    partition = net_sub.add_parser("partition", help="split the brokers into two sides that cannot reach each other",
                                   description="SIDE is a comma-separated list of broker ids and, optionally, zk: "
                                               "'1,2 3' cuts brokers 1 and 2 from 3 with ZooKeeper reachable from "
                                               "both; '1,2,zk 3' puts ZooKeeper with 1 and 2, so 3 loses its "
                                               "session too. One side alone ('1') puts every other broker on the "
                                               "other side.")
    partition.add_argument("sides", nargs="+", metavar="SIDE")
    _docker_options(partition)
    heal = net_sub.add_parser("heal", help="remove every cut and slow link of the cluster (with --docker: and "
                                           "reconnect disconnected brokers)")
    _docker_options(heal)
    slow = net_sub.add_parser("slow", help="delay (and lose) what one broker sends, with tc netem on its link",
                              description="netem on the egress of the broker's own end of its veth pair, so "
                                          "everything it sends is delayed: answers to clients, fetches, ZooKeeper "
                                          "heartbeats. Replaces an earlier 'slow' of the same broker; 'kafkasim net "
                                          "heal' removes it. With --docker: the container's interface on the compose "
                                          "network. Needs a kernel with netem (CONFIG_NET_SCH_NETEM): without it "
                                          "the command says so and changes nothing.")
    slow.add_argument("broker_id", type=int)
    slow.add_argument("--delay-ms", type=int, required=True)
    slow.add_argument("--jitter-ms", type=int, default=0)
    slow.add_argument("--loss", type=float, default=0.0, metavar="PERCENT")
    _docker_options(slow)
    status = net_sub.add_parser("status", help="the cluster's addresses and what is cut or slowed now")
    _docker_options(status)
    clean = net_sub.add_parser("clean", help="after a crash: stop the recorded processes, remove the namespaces, "
                                             "bridge, veths and rules, and leftovers of other runs by name",
                               description="Removes the network cluster.json records (its processes are stopped "
                                           "by their PID files first), then every kafkasim-<tag>-* namespace and "
                                           "ksim<tag>h link with no process in it and older than --stale-after: a "
                                           "cluster starting or running elsewhere is left alone.")
    clean.add_argument("--stale-after", type=float, default=60.0, metavar="SECONDS",
                       help="leftovers of other runs must be this old (default 60)")


def _docker_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--docker", action="store_true",
                         help="act on the docker-compose cluster's containers (Docker Engine API)")
    command.add_argument("--project", default=None,
                         help="with --docker: the compose project (default: the only one running kafkasim)")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.command in ("broker", "zookeeper") else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    data_dir = (args.data_dir or default_data_dir()).resolve()
    try:
        return _dispatch(args, data_dir)
    except NotRootError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _dispatch(args: argparse.Namespace, data_dir: Path) -> int:
    if args.command == "net" and getattr(args, "docker", False):
        from cluster.docker_net import run_net_command

        return run_net_command(args.net_command, args.project, data_dir / "docker", getattr(args, "broker_id", None),
                               getattr(args, "peers", None), getattr(args, "sides", None),
                               getattr(args, "delay_ms", 0), getattr(args, "jitter_ms", 0), getattr(args, "loss", 0.0))
    # the fault commands act on the compose cluster (`_docker_options`: --docker and --project); the dashboard's own
    # --docker only tells it where it runs
    if getattr(args, "docker", False) and hasattr(args, "project"):
        if getattr(args, "zookeeper", False) is True:
            raise ClusterError(f"kafkasim {args.command} --zookeeper acts on a cluster of `kafkasim up`; in compose, "
                               f"`docker compose {'stop' if args.command == 'kill' else 'start'} zookeeper` does it")
        from cluster.docker_ops import run_docker_command

        return run_docker_command(args.command, args.project, data_dir / "docker", getattr(args, "broker_id", None),
                                  getattr(args, "controller", False), getattr(args, "leader_of", None),
                                  getattr(args, "signal", "KILL"), getattr(args, "out", None))
    handler = COMMANDS.get(args.command)
    if handler is None:
        raise ClusterError(f"unknown command {args.command!r}; `kafkasim --help` lists them")
    return handler(args, data_dir)


def _docker_only(args: argparse.Namespace, _data_dir: Path) -> int:
    raise ClusterError(f"kafkasim {args.command} acts on a docker-compose cluster: add --docker "
                       "(for a local broker: kafkasim kill --signal STOP / CONT)")


def _broker(args: argparse.Namespace, _data_dir: Path) -> int:
    return broker_entry.run(args.config, _key_values(args.override, "--override"), args.zookeeper)


def _zookeeper(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster import commands

    return commands.run_zookeeper(data_dir, args.port, args.tick_time)


def _up(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.lifecycle import up

    up(data_dir, args.brokers, args.zookeeper, args.profile, _key_values(args.override, "--override"),
       args.base_port, args.zookeeper_port, args.tick_time, netns=args.netns, subnet=args.subnet,
       log_dir_size_mib=args.log_dir_size_mib)
    return 0


def _net(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.net import actions
    from cluster.net.faults import FaultError

    try:
        if args.net_command == "isolate":
            actions.isolate(data_dir, args.broker_id, args.peers)
        elif args.net_command == "partition":
            actions.partition(data_dir, args.sides)
        elif args.net_command == "heal":
            actions.heal(data_dir)
        elif args.net_command == "slow":
            actions.slow(data_dir, args.broker_id, args.delay_ms, args.jitter_ms, args.loss)
        elif args.net_command == "status":
            actions.status(data_dir)
        else:
            actions.clean(data_dir, args.stale_after)
    except FaultError as exc:
        raise ClusterError(str(exc)) from None
    return 0


def _fill(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster import disk

    (disk.free if args.free else disk.fill)(data_dir, args.broker_id)
    return 0


def _down(_args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.lifecycle import down

    down(data_dir)
    return 0


def _start(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.lifecycle import start_broker, start_zookeeper

    if args.zookeeper:
        start_zookeeper(data_dir)
    else:
        start_broker(data_dir, args.broker_id)
    return 0


def _analyze(args: argparse.Namespace, _data_dir: Path) -> int:
    from analysis.analyze import run_analyze
    from analysis.load import RunDirectoryError

    if not args.run_dir.is_dir():
        raise ClusterError(f"{args.run_dir} is not a folder; run `kafkasim traces collect --out DIR` first")
    try:
        with _working(f"analysing {args.run_dir} with PySpark"):
            summary, written = run_analyze(args.run_dir.resolve(), args.out, args.master, args.history,
                                           args.include_internal)
    except RunDirectoryError as exc:
        raise ClusterError(str(exc)) from None
    print(summary, end="")
    print(f"wrote {len(written)} files into {written[0].parent}")
    return 0


def _traces(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.traces_cmd import collect, default_out

    with _working(f"collecting traces and final logs of {data_dir}"):
        collected = collect([data_dir], args.out or default_out(data_dir))
    print(collected.summary())
    return 0


def _working(what: str) -> AbstractContextManager:
    """A spinner on stderr while long work runs (shown on a terminal only; stdout stays the command's output)."""
    from rich.console import Console

    return Console(stderr=True).status(f"{what}...")


def _groups(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.groups import delete_groups, describe_group, list_groups

    spec = ClusterLayout(data_dir).load()
    if args.groups_command == "describe":
        return describe_group(spec.bootstrap_servers, args.group)
    if args.groups_command == "delete":
        return delete_groups(spec.bootstrap_servers, args.group)
    return list_groups(spec.bootstrap_servers)


def _records(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.records import delete, offsets_from

    offsets = offsets_from(args.topic, args.partition, args.offset, args.offset_json_file)
    return delete(ClusterLayout(data_dir).load().bootstrap_servers, offsets)


def _status(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster import commands
    from cluster.processes import metrics_url

    spec = ClusterLayout(data_dir).load()
    if not args.watch:
        code = asyncio.run(commands.status(spec.zookeeper, args.json))
        urls = [f"  broker {b.broker_id}: {url}" for b in spec.brokers if (url := metrics_url(b))]
        if urls and not args.json:
            print("Prometheus metrics:\n" + "\n".join(urls))
        return code
    if args.json:
        raise ClusterError("--watch redraws tables; --json prints one state: choose one")
    if args.interval <= 0:
        raise ClusterError("--interval must be more than 0 seconds")
    from rich.console import Console

    from cluster.status_watch import watch

    try:
        asyncio.run(watch(spec.zookeeper, [b.broker_id for b in spec.brokers], _broker_min_isr(spec),
                          args.interval, Console()))
    except KeyboardInterrupt:
        pass
    return 0


def _broker_min_isr(spec: ClusterSpec) -> str | None:
    return spec.overrides.get("min.insync.replicas", PROFILES[spec.profile].get("min.insync.replicas"))


def _topic(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster import commands

    zookeeper = ClusterLayout(data_dir).load().zookeeper
    if args.topic_command == "create":
        return asyncio.run(commands.topic_create(zookeeper, args.name, args.partitions, args.replication_factor,
                                                 _key_values(args.config, "--config")))
    if args.topic_command == "alter":
        return asyncio.run(commands.topic_alter(zookeeper, args.name, args.partitions))
    if args.topic_command == "describe":
        return asyncio.run(commands.topic_describe(zookeeper, args.name, args.json, args.report,
                                                   _broker_min_isr(ClusterLayout(data_dir).load())))
    return asyncio.run(commands.topic_delete(zookeeper, args.name))


def _chaos(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.chaos.command import run_command

    return run_command(args, data_dir)


def _scenario(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.scenarios.command import run_command

    return run_command(args, data_dir)


def _leaders(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.leaders import elect

    if args.partition is not None and args.topic is None:
        raise ClusterError("--partition needs --topic")
    return elect(ClusterLayout(data_dir).load().bootstrap_servers, args.topic, args.partition, args.unclean)


def _reassign(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster.reassign import run

    bootstrap = args.bootstrap_server or ClusterLayout(data_dir).load().bootstrap_servers
    return run(bootstrap, args.partition, args.replicas, args.status, args.cancel)


def _config_entity(parser: argparse.ArgumentParser) -> None:
    # not required here: either the command or its word (`config set ...`) names the entity, checked in _config
    entity = parser.add_mutually_exclusive_group()
    entity.add_argument("--topic", default=argparse.SUPPRESS)
    entity.add_argument("--broker", type=int, default=argparse.SUPPRESS,
                        help="one broker's configs; what it sets wins over --broker-defaults")
    entity.add_argument("--broker-defaults", action="store_true", default=argparse.SUPPRESS,
                        help="the cluster-wide broker default (/config/brokers/<default>), like kafka-configs.sh "
                             "--entity-type brokers --entity-default")


def _config(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster import configs

    named = [name for name in ("topic", "broker", "broker_defaults") if getattr(args, name, None) not in (None, False)]
    if len(named) != 1:
        raise ClusterError("name one of --topic T, --broker N or --broker-defaults")
    args.topic, args.broker = getattr(args, "topic", None), getattr(args, "broker", None)
    args.broker_defaults = getattr(args, "broker_defaults", False)
    action = getattr(args, "config_action", None)
    if action is not None and (args.describe or args.set or args.delete):
        raise ClusterError(f"`config {action}` already says what to do: leave out --describe, --set and --delete")
    if action == "describe":
        args.describe = True
    elif action == "set":
        args.set = list(args.items)
    elif action == "delete":
        args.delete = list(args.items)
    bootstrap = ClusterLayout(data_dir).load().bootstrap_servers
    if args.describe == bool(args.set or args.delete):
        raise ClusterError("give either --describe or at least one --set/--delete")
    if args.describe:
        return configs.describe(bootstrap, topic=args.topic, broker=args.broker)
    return configs.alter(bootstrap, configs.parse_assignments(args.set), args.delete, topic=args.topic,
                         broker=args.broker)


def _kill(args: argparse.Namespace, data_dir: Path) -> int:
    from cluster import commands

    if args.zookeeper:
        from cluster.lifecycle import stop_zookeeper

        stop_zookeeper(data_dir, SIGNALS[args.signal])
        return 0
    spec = ClusterLayout(data_dir).load()
    return asyncio.run(commands.kill(data_dir, spec, args.broker_id, args.controller, args.leader_of,
                                     SIGNALS[args.signal]))


# one entry per subcommand of _parser(); tests/cluster/test_cli.py checks that the two agree
COMMANDS: dict[str, Callable[[argparse.Namespace, Path], int]] = {
    "zookeeper": _zookeeper,
    "broker": _broker,
    "up": _up,
    "down": _down,
    "fill": _fill,
    "start": _start,
    "status": _status,
    "topic": _topic,
    "kill": _kill,
    "leaders": _leaders,
    "reassign": _reassign,
    "config": _config,
    "pause": _docker_only,
    "unpause": _docker_only,
    "disconnect": _docker_only,
    "connect": _docker_only,
    "net": _net,
    "groups": _groups,
    "records": _records,
    "bench": bench_command.run,
    "chaos": _chaos,
    "traces": _traces,
    "analyze": _analyze,
    "dashboard": dashboard_command.run,
    "scenario": _scenario,
    "demo": _scenario,
}


if __name__ == "__main__":
    sys.exit(main())
