"""Runs a scenario: its own cluster (or a running one), its topics, then every step — narration and prediction,
the action, what the observer read, the prediction checked — and a verdict. The run folder it leaves is what
``kafkasim traces collect`` gathers, so ``kafkasim analyze`` reads it."""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cluster.lifecycle import down, up
from cluster.processes import ClusterError, ClusterLayout
from cluster.scenarios.actions import ACTIONS, heal, thaw
from cluster.scenarios.context import ScenarioError, ScenarioRun, wait_until
from cluster.scenarios.model import STORY_DEFAULTS, Scenario, Verdict, check, resolve, show
from cluster.scenarios.observer import observe
from cluster.traces_cmd import collect
from traces import events as te
from traces.faults import TOOLS_TRACE_FILE, record
from zk.admin import create_topic
from zk.znodes import TopicZNode

EXIT_HELD, EXIT_NOT_HELD, EXIT_ERROR = 0, 1, 2


@dataclass
class Options:
    pace: str = "auto"             # "auto" runs through, "step" waits for Enter before each step
    speed: float = 1.0             # pauses are the scenario's pause_s / speed ("inf": none)
    keep: bool = False             # leave the cluster running
    out: Path | None = None        # the run folder
    existing: Path | None = None   # the data dir of a running cluster to use instead of starting one


def default_out(data_dir: Path, name: str) -> Path:
    return data_dir / "scenarios" / time.strftime(f"{name}-%Y%m%dT%H%M%SZ", time.gmtime())


def run_scenario(scenario: Scenario, options: Options, data_dir: Path, console: Console | None = None) -> int:
    console = console or Console(width=None if sys.stdout.isatty() else 120)
    out = (options.out or default_out(data_dir, scenario.name)).resolve()
    if out.exists() and any(out.iterdir()):
        raise ClusterError(f"{out} is not empty; choose a new --out folder")
    if options.speed <= 0:
        raise ClusterError("--speed must be more than 0 (higher is faster; 'inf' leaves out every pause)")
    console.rule(f"[bold]{scenario.title}[/bold]")
    console.print(scenario.summary)
    run, own_cluster = _cluster(scenario, options, out, console)
    verdicts: list[Verdict] = []
    error: str | None = None
    try:
        _create_topics(scenario, run)
        facts, table = observe(run)
        run.facts |= facts
        console.print(table)
        for number, step in enumerate(scenario.steps, 1):
            verdicts += _step(run, scenario.name, number, len(scenario.steps), step, options, console,
                              scenario.pause_s)
    except (ScenarioError, ClusterError) as exc:
        error = str(exc)
    except Exception as exc:  # a bug of the scenario (an action's wrong argument...): still a report and a cleanup
        error = f"{type(exc).__name__}: {exc}"

    finally:
        for producer in list(run.producers.values()):
            producer.stop()
        for consumer in run.consumers.values():
            consumer.stop()
        if run.transformer is not None:
            run.transformer.close()
        for broker in list(run.frozen):
            thaw(run, broker)  # a story that failed between freeze and thaw leaves no broker stopped
        if run.cut:
            heal(run)  # nor a link cut (an --existing cluster is not taken down, which would heal it too)
        out.mkdir(parents=True, exist_ok=True)
        _finish(scenario, run, out, own_cluster, options, verdicts, error, console)
    if error is not None:
        return EXIT_ERROR
    return EXIT_HELD if all(v.held for v in verdicts) else EXIT_NOT_HELD


def _cluster(scenario: Scenario, options: Options, out: Path, console: Console) -> tuple[ScenarioRun, bool]:
    topics = [t.name for t in scenario.topics]
    if options.existing is not None:
        spec = ClusterLayout(options.existing).load()
        run = ScenarioRun(options.existing, spec, topics)
        if scenario.netns and spec.network is None:
            raise ClusterError(f"{scenario.name} cuts network links, so it needs a cluster in network namespaces; "
                               f"the cluster in {options.existing} runs on loopback: leave out --existing (the "
                               "scenario starts one as root) or start one with 'kafkasim up --netns'")
        if len(spec.brokers) < scenario.brokers:
            raise ClusterError(f"{scenario.name} needs {scenario.brokers} brokers; the cluster in "
                               f"{options.existing} has {len(spec.brokers)}")
        taken = [t for t in topics if run.zk(lambda zk, t=t: zk.exists(TopicZNode.path(t))) is not None]
        if taken:
            raise ClusterError(f"topic(s) {', '.join(taken)} already exist in the cluster of {options.existing}: "
                               f"{scenario.name} needs them fresh; delete them (kafkasim topic delete) or let the "
                               "scenario start its own cluster (leave out --existing)")
        console.print(f"using the running cluster of {options.existing} ({spec.bootstrap_servers})")
        return run, False
    cluster_dir = out.with_name(out.name + ".cluster")
    if cluster_dir.exists():
        raise ClusterError(f"{cluster_dir} exists; choose a new --out folder")
    overrides = {**STORY_DEFAULTS, **scenario.overrides}
    settings = ", ".join(f"{k}={v}" for k, v in overrides.items())
    subnet = _free_subnet(scenario.name) if scenario.netns else None
    with console.status(f"starting ZooKeeper and {scenario.brokers} brokers (profile {scenario.profile})..."):
        spec = up(cluster_dir, scenario.brokers, None, scenario.profile, overrides, base_port=0,
                  zookeeper_port=0, say=lambda _: None, subnet=subnet)
    namespaces = f", namespaces kafkasim-{spec.network['tag']}-* on {subnet}" if spec.network else ""
    console.print(f"cluster: {scenario.brokers} brokers, profile {scenario.profile}"
                  + (f", {settings}" if settings else "") + namespaces
                  + f"; bootstrap {spec.bootstrap_servers}")
    return ScenarioRun(cluster_dir, spec, topics), True


def _free_subnet(name: str) -> str:
    from cluster.net import system
    from cluster.net.plan import PlanError, free_subnet

    system.require_root(f"scenario {name}")
    try:
        return free_subnet(system.host_routes())
    except PlanError as exc:
        raise ClusterError(str(exc)) from None


def _create_topics(scenario: Scenario, run: ScenarioRun) -> None:
    controller = wait_until(lambda: (c := run.state([]).controller_id) >= 0 and c, 15, "a controller")
    brokers = run.broker_ids()
    chosen: dict[str, list[int]] = {}
    for topic in scenario.topics:
        if topic.same_replicas_as is not None:
            replicas = chosen[topic.same_replicas_as]
        else:
            others = [b for b in brokers if b != controller]
            first = {"controller": [controller], "not-controller": others[:1]}.get(topic.leader or "", [])
            replicas = (first + [b for b in [*others, controller] if b not in first])[:topic.replicas]
        chosen[topic.name] = replicas
        run.zk(lambda zk, t=topic, r=replicas: create_topic(zk, t.name, t.partitions, len(r), dict(t.config),
                                                            assignment={p: list(r) for p in range(t.partitions)}))
    for topic, replicas in chosen.items():
        wait_until(lambda t=topic, r=replicas: (v := run.state([t]).partition(t, 0)) is not None
                   and v.leader == r[0] and sorted(v.isr) == sorted(r), 20, f"{topic} to be led by {replicas[0]}")
        for broker in replicas:  # every replica applied its LeaderAndIsr: the leader takes writes, followers fetch
            wait_until(lambda b=broker, t=topic: any(isinstance(e, te.ReplicaRoleChanged) and e.topic == t
                                                     for e in run.traces(b)), 15, f"broker {broker} to host {topic}")


def _step(run: ScenarioRun, name: str, number: int, total: int, step: Any, options: Options, console: Console,
          pause_s: float) -> list[Verdict]:
    console.rule(f"step {number}/{total}")
    console.print(step.narration)
    for expect in step.expect:
        why = f"  ({expect.why})" if expect.why else ""
        console.print(f"  [cyan]Kafka predicts[/cyan]: {expect.describe(run.facts)}{why}")
    prediction = "; ".join(expect.describe(run.facts) for expect in step.expect)
    _narrate(run, name, number, total, step.narration, prediction, "started")
    if options.pace == "step":
        console.input("[dim]press Enter to go on[/dim] ")
    run.facts |= {name: run.facts[fact] for name, fact in step.remember.items() if fact in run.facts}
    action = ACTIONS.get(step.action)
    if action is None:
        raise ScenarioError(f"step {number} names the action {step.action!r}; there are {', '.join(ACTIONS)}")
    try:
        args = resolve(dict(step.args), run.facts)
    except KeyError as exc:
        raise ScenarioError(f"step {number} uses ${exc.args[0]}, which no earlier step remembered") from None
    measured = action(run, **args)
    run.facts |= measured
    facts, table = observe(run)
    run.facts |= facts
    console.print(table)
    if measured:
        console.print("measured: " + ", ".join(f"{k} = {show(v)}" for k, v in measured.items()))
    verdicts = [check(number, expect, run.facts) for expect in step.expect]
    for verdict in verdicts:
        console.print(f"  {_held(verdict)}: {verdict.expect.fact} = {show(verdict.measured)} "
                      f"(predicted {verdict.expect.comparison} {show(verdict.expected)})"
                      + (f" — {verdict.problem}" if verdict.problem else ""))
    if verdicts:
        missed = [v for v in verdicts if not v.held]
        _narrate(run, name, number, total, step.narration, prediction, "did not hold" if missed else "held",
                 "; ".join(f"{v.expect.fact} = {show(v.measured)}" for v in missed))
    if options.speed != float("inf") and number < total:
        time.sleep(pause_s / options.speed)
    return verdicts


def _narrate(run: ScenarioRun, name: str, number: int, total: int, narration: str, prediction: str, outcome: str,
             detail: str = "") -> None:
    """The step in the tools' trace of the cluster, where the dashboard's feed tells it beside the faults."""
    record(run.data_dir / TOOLS_TRACE_FILE, te.ScenarioStep(
        ts_ms=time.time() * 1000, mono_ns=time.monotonic_ns(), scenario=name, step=number, steps=total,
        narration=narration, prediction=prediction, outcome=outcome, detail=detail))  # type: ignore[arg-type]


def _held(verdict: Verdict) -> str:
    return "[green]held[/green]" if verdict.held else "[red]did not hold[/red]"


def _finish(scenario: Scenario, run: ScenarioRun, out: Path, own_cluster: bool, options: Options,
            verdicts: list[Verdict], error: str | None, console: Console) -> None:
    table = Table(title=f"verdict: {scenario.name}", title_justify="left")
    for column in ("step", "prediction", "measured", "verdict"):
        table.add_column(column)
    for verdict in verdicts:
        named = f" ({verdict.expect.expected})" if verdict.expected != verdict.expect.expected else ""
        table.add_row(str(verdict.step),
                      f"{verdict.expect.fact} {verdict.expect.comparison} {show(verdict.expected)}{named}",
                      show(verdict.measured) + (f" ({verdict.problem})" if verdict.problem else ""), _held(verdict))
    console.print(table)
    held = error is None and all(v.held for v in verdicts)
    if error is not None:
        console.print(f"[red]the scenario could not finish[/red]: {error}")
    else:
        console.print("[green bold]every prediction held[/green bold]" if held else
                      f"[red bold]{sum(not v.held for v in verdicts)} prediction(s) did not hold[/red bold]")
    try:
        _collect(run.data_dir, out)
    except ClusterError as exc:
        console.print(f"[yellow]warning[/yellow]: no run folder: {exc}")
    (out / "verdict.json").write_text(json.dumps({
        "scenario": scenario.name, "held": held, "error": error,
        "verdicts": [{"step": v.step, "fact": v.expect.fact, "comparison": v.expect.comparison,
                      "expected": v.expected, "measured": v.measured, "held": v.held, "problem": v.problem}
                     for v in verdicts]}, indent=2, default=str) + "\n")
    console.print(f"run folder: {out} (`kafkasim analyze {out}` draws its timeline)")
    if own_cluster and not options.keep:
        with console.status("stopping the cluster..."):
            down(run.data_dir, say=lambda _: None, timeout_s=10, controlled=False)  # its logs are collected
        shutil.rmtree(run.data_dir, ignore_errors=True)
    elif own_cluster:
        console.print(f"the cluster keeps running: --data-dir {run.data_dir} (`kafkasim --data-dir {run.data_dir} "
                      "down` stops it)")
    for line in scenario.next_steps:
        console.print(line)


def _collect(data_dir: Path, out: Path) -> None:
    """What `kafkasim traces collect` gathers, written into the run folder itself."""
    staging = out / ".collecting"
    collect([data_dir], staging)
    for item in staging.iterdir():
        item.rename(out / item.name)
    staging.rmdir()
    manifest = out / "collected.json"
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"out": str(out)}, indent=2) + "\n")
