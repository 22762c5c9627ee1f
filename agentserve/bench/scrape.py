"""One Prometheus scrape of a replica's /metrics, as {(sample name, sorted labels): value}."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Sample = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Sample:
    out: Sample = {}
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def mean_between(before: Sample, after: Sample, name: str, **labels: str) -> tuple[float | None, int]:
    """A histogram's mean over what it observed between two scrapes (`name` without `_sum` / `_count`), summed over
    the series whose labels include `labels`; and how many observations that was."""
    def total(sample: Sample, suffix: str) -> float:
        return sum(v for (n, ls), v in sample.items()
                   if n == name + suffix and all((k, want) in ls for k, want in labels.items()))

    count = total(after, "_count") - total(before, "_count")
    if count <= 0:
        return None, 0
    return (total(after, "_sum") - total(before, "_sum")) / count, int(count)
