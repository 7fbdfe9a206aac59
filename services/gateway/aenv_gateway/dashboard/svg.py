"""A sandbox's metrics as an inline SVG: CPU % and memory used (% of its total) over time, from
the samples its node agent keeps (the API's `GET /sandboxes/{id}/metrics`)."""

from __future__ import annotations

from collections.abc import Sequence

from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_gateway.dashboard.html import esc

WIDTH, HEIGHT, PAD = 600, 160, 24


def _points(samples: Sequence[nodeagent_pb2.SandboxMetric], values: list[float]) -> str:
    first, last = samples[0].timestamp.seconds, samples[-1].timestamp.seconds
    span = max(1, last - first)
    out = []
    for sample, value in zip(samples, values, strict=True):
        x = PAD + (WIDTH - 2 * PAD) * (sample.timestamp.seconds - first) / span
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * min(max(value, 0.0), 100.0) / 100.0
        out.append(f"{x:.1f},{y:.1f}")
    return " ".join(out)


def metrics_plot(samples: Sequence[nodeagent_pb2.SandboxMetric]) -> str:
    if not samples:
        return "<p>No metrics sampled yet.</p>"
    cpu = [s.cpu_used_pct for s in samples]
    mem = [100.0 * s.mem_used / s.mem_total if s.mem_total else 0.0 for s in samples]
    last = samples[-1]
    summary = (f"{len(samples)} samples; latest CPU {last.cpu_used_pct:.1f}% of "
               f"{last.cpu_count} vCPU, memory {last.mem_used // 2**20} of "
               f"{last.mem_total // 2**20} MiB")
    axis = (f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
            'stroke="#6b7280"/>'
            f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#6b7280"/>'
            f'<text x="2" y="{PAD + 4}" font-size="10">100%</text>'
            f'<text x="2" y="{HEIGHT - PAD}" font-size="10">0%</text>')
    lines = (f'<polyline fill="none" stroke="#2563eb" stroke-width="2" '
             f'points="{_points(samples, cpu)}"/>'
             f'<polyline fill="none" stroke="#d97706" stroke-width="2" stroke-dasharray="4 2" '
             f'points="{_points(samples, mem)}"/>')
    legend = (f'<text x="{WIDTH - 200}" y="14" font-size="11" fill="#2563eb">— CPU %</text>'
              f'<text x="{WIDTH - 110}" y="14" font-size="11" fill="#d97706">- - memory %</text>')
    return (f'<figure><svg role="img" aria-labelledby="metrics-title" width="{WIDTH}" '
            f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">'
            f'<title id="metrics-title">CPU and memory over time</title>{axis}{lines}{legend}'
            f"</svg><figcaption>{esc(summary)}</figcaption></figure>")
