"""``kafkasim dashboard``: the options, the safety defaults, and the server (uvicorn) in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import socket
from pathlib import Path

from cluster.processes import ClusterError, ClusterLayout

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def add_parser(sub: argparse._SubParsersAction) -> None:
    dashboard = sub.add_parser(
        "dashboard", help="a live web page of the cluster: brokers, partitions, offsets, events, groups",
        description="Serves a page that updates several times a second from ZooKeeper, the brokers (DescribeBroker "
                    "and, where served, their metrics) and the trace files. Fault buttons (kill -9, pause, resume, "
                    "start, isolate, heal) need --allow-faults, which is on by default for a classroom-profile "
                    "cluster; the page binds to 127.0.0.1 unless --host says otherwise.")
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    dashboard.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    dashboard.add_argument("--allow-faults", action=argparse.BooleanOptionalAction, default=None,
                           help="enable the fault buttons (default: on for the classroom profile, off otherwise)")
    dashboard.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", default=None,
                           help="watch the cluster registered in this ZooKeeper instead of the one in --data-dir "
                                "(read-only: no PID files to act on; brokers found through their registrations)")
    dashboard.add_argument("--docker", action="store_true",
                           help="with --zookeeper: the docker-compose cluster; the fault buttons act on its containers "
                                "through the Docker Engine API (as `kafkasim kill ... --docker` does)")
    dashboard.add_argument("--trace", type=Path, action="append", default=None, metavar="FILE",
                           help="a trace file to follow in the event feed besides the cluster's own; repeatable "
                                "(the compose service follows the brokers' volumes)")
    dashboard.add_argument("--interval", type=float, default=0.25, metavar="SECONDS",
                           help="how often the cluster is polled (default 0.25)")


def faults_allowed(option: bool | None, profile: str) -> bool:
    """--allow-faults / --no-allow-faults when given; otherwise on for the classroom profile only, so a dashboard on
    a cluster run with Kafka's own settings is read-only unless asked."""
    return option if option is not None else profile == "classroom"


def check_port_free(host: str, port: int) -> None:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        raise ClusterError(f"cannot listen on {host}:{port} ({exc.strerror}): stop what holds it, or choose "
                           "another port with --port N") from None


def run(args: argparse.Namespace, data_dir: Path) -> int:
    import uvicorn

    from cluster.dashboard.app import create_app
    from cluster.dashboard.poller import Poller

    if args.interval <= 0:
        raise ClusterError("--interval must be above 0")
    docker_tools_dir = None
    if args.docker and args.zookeeper is None:
        raise ClusterError("--docker needs --zookeeper HOST:PORT, the compose cluster's ZooKeeper")
    if args.zookeeper is not None:
        spec, layout, zookeeper = None, None, args.zookeeper
        if args.docker:
            act_on, docker_tools_dir = data_dir, data_dir / "docker"
            allow_faults = bool(args.allow_faults)
        else:
            act_on, allow_faults = None, False
            if args.allow_faults:
                print("warning: --zookeeper without --docker shows a cluster this dashboard cannot act on: the fault "
                      "buttons stay off")
    else:
        layout = ClusterLayout(data_dir)
        spec = layout.load()
        zookeeper, act_on = spec.zookeeper, data_dir
        allow_faults = faults_allowed(args.allow_faults, spec.profile)
    check_port_free(args.host, args.port)
    poller = Poller(zookeeper, spec, layout, allow_faults, interval_s=args.interval, extra_traces=args.trace,
                    docker_tools_dir=docker_tools_dir)
    app = create_app(poller, act_on, docker=args.docker)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    print(f"kafkasim dashboard on http://{shown}:{args.port}/ for {zookeeper} "
          f"({'fault buttons on' if allow_faults else 'read-only'})", flush=True)
    if allow_faults and args.host not in LOOPBACK:
        print(f"warning: the fault buttons can kill brokers and this page listens on {args.host}: anyone who "
              "reaches it can use them (--no-allow-faults for a read-only page)", flush=True)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                            lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    asyncio.run(server.serve())
    return 0
