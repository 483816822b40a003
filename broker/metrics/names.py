"""Kafka MBean names to Prometheus names, by the rules of the Prometheus JMX exporter's Kafka example
(``example_configs/kafka-2_0_0.yml``), so dashboards and alerts written for a real Kafka read kafkasim too.

Pure: an MBean (domain, type, name) and its kind in, the exported name out.
"""

from __future__ import annotations

import enum
import re


class Kind(enum.Enum):
    GAUGE = "gauge"          # a Yammer Gauge: its Value
    METER = "meter"          # a Yammer Meter: its Count, as a counter ending in _total
    HISTOGRAM = "histogram"  # a Yammer Histogram or Timer: NNthPercentile as quantile="0.NN" and Count as _count


_PER_SEC = "PerSec"


def _part(text: str) -> str:
    # lowercaseOutputName: true; hyphens (LogCleaner's max-dirty-percent) become underscores
    return re.sub(r"[^a-zA-Z0-9_]", "_", text).lower()


def exporter_name(domain: str, mbean_type: str, name: str, kind: Kind) -> str:
    """(``kafka.server``, ``ReplicaManager``, ``IsrShrinksPerSec``, METER) is
    ``kafka_server_replicamanager_isrshrinks_total``.

    Meters lose their ``PerSec`` and gain ``_total`` (the exporter keeps only their Count; rates are for
    Prometheus to compute); gauges and histograms keep their name as it is."""
    if not domain.startswith("kafka."):
        raise ValueError(f"{domain!r} is not a Kafka MBean domain (kafka.server, kafka.network, ...)")
    base = f"kafka_{_part(domain.removeprefix('kafka.'))}_{_part(mbean_type)}"
    if kind is Kind.METER:
        return f"{base}_{_part(name.removesuffix(_PER_SEC))}_total"
    return f"{base}_{_part(name)}"


def histogram_count_name(histogram_name: str) -> str:
    return f"{histogram_name}_count"


def quantile_label(percentile: float) -> str:
    """Yammer's ``99thPercentile`` is ``quantile="0.99"``, ``999thPercentile`` ``quantile="0.999"``, and the
    exporter writes ``50thPercentile`` as ``0.50``: the digits of the attribute after "0."."""
    digits = f"{percentile:g}".replace(".", "")
    return f"0.{digits}"


# the percentiles every Yammer histogram reports (50th, 75th, 95th, 98th, 99th, 99.9th)
PERCENTILES = (50, 75, 95, 98, 99, 99.9)


def request_label(api_name: str) -> str:
    """Kafka labels request metrics with ApiKeys' names: ``API_VERSIONS`` is ``ApiVersions``, ``PRODUCE``
    ``Produce``. An API key kafkasim does not know stays as its number."""
    if api_name.isdigit():
        return api_name
    return "".join(word.capitalize() for word in api_name.split("_"))
