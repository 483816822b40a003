"""Every bench by name: what it measures in a line, the options it takes, and how to run it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from cluster.bench.progress import Progress
from cluster.bench.report import Report


@dataclass(frozen=True)
class Bench:
    name: str
    summary: str
    options: Callable[[argparse.ArgumentParser], None]   # adds the bench's own options to its subparser
    run: Callable[[argparse.Namespace, Progress], Report]


def benches() -> dict[str, Bench]:
    """In the order ``kafkasim bench list`` shows them. Each adapter imports its measuring code only when
    it runs, so listing and parsing stay quick."""
    from cluster.bench import (
        analysis,
        client,
        dashboard,
        foundation,
        groups,
        log,
        metrics,
        page_cache,
        purgatory,
        reassign,
        replication,
        scale,
        trace,
        transactions,
    )

    adapters = (foundation, client, replication, reassign, groups, transactions, scale, trace, log, purgatory,
                analysis, page_cache, metrics, dashboard)
    return {adapter.BENCH.name: adapter.BENCH for adapter in adapters}
