"""Small shared helpers of the benchmarks: percentiles and JSON output."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def summary_ms(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in samples_s)
    if not ms:
        return {}
    q = statistics.quantiles(ms, n=10, method="inclusive") if len(ms) > 1 else [ms[0]] * 9
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 2), "p90_ms": round(q[8], 2),
            "min_ms": round(ms[0], 2), "max_ms": round(ms[-1], 2)}


def emit(name: str, result: dict[str, Any]) -> None:
    """Print the result as JSON and keep a copy under bench/results/."""
    text = json.dumps(result, indent=2, default=str)
    print(text)
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(text + "\n")
    sys.stdout.flush()
