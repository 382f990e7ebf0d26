"""A collection (devctl.model.exporter) as prometheus_client metric families: the exposition formats, the
content negotiation between them and the escaping of label values are prometheus_client's, not hand-written.
A label whose value is empty is left out of its series (Prometheus reads an empty label as no label): the
Kubernetes labels off Kubernetes, a GPU's `device` where no JAX device matched it."""

from __future__ import annotations

from typing import Any, Iterator

from devctl.model.exporter import METRICS, Collection


def families(collection: Collection) -> Iterator[Any]:
    """Every metric of METRICS, in its order, with this collection's samples (a metric without any: no series)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

    by_name: dict[str, list] = {}
    for s in collection.samples:
        by_name.setdefault(s.name, []).append(s)
    for spec in METRICS:
        if spec.name in ("devctl_collect_success", "devctl_collect_duration_seconds"):
            per_source = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            for source, result in collection.sources.items():
                per_source.add_metric([source], (1.0 if result.success else 0.0) if spec.name.endswith("success") else result.duration_s)
            yield per_source
            continue
        samples = by_name.get(spec.name, [])
        if spec.kind == "info":
            info = InfoMetricFamily(spec.name, spec.help)
            for s in samples:
                info.add_metric([], {k: s.labels.get(k, "") for k in spec.labels})
            yield info
            continue
        family: Any
        if spec.kind == "counter":
            family = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
        else:
            family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
        for s in samples:
            family.add_sample(spec.name if spec.kind == "counter" else family.name, {k: v for k in spec.labels if (v := s.labels.get(k, ""))}, s.value)
        yield family

