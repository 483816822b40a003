"""Scraping a broker's /metrics in the tests: the text parsed by prometheus_client's own parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from cluster.processes import metrics_url
from tests.harness import RunningCluster

Samples = dict[tuple[str, frozenset], float]


def scrape_url(url: str, timeout_s: float = 5.0) -> Samples:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(cluster: RunningCluster, broker_id: int) -> Samples:
    url = metrics_url(cluster.spec.broker(broker_id))
    assert url is not None, "kafkasim up gave this broker no metrics port"
    return scrape_url(url)


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for a labelled sample not reported yet (a topic nothing was produced to)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
