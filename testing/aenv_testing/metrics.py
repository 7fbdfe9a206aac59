"""Reading a service's `/metrics` in tests: every sample by name and labels, parsed with
prometheus_client's own parser, and how far one moved between two scrapes."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(url: str) -> Samples:
    """GET `url` (blocking: call it in a thread from async code)."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        return parse(reply.read().decode())


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)
