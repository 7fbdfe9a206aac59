"""A sandbox's traces drawn from the services' JSON-lines span files, as `aenv trace` reads them."""

from __future__ import annotations

import json
from pathlib import Path

from aenv_gateway.dashboard.waterfall import trace_section


def _span(trace: str, name: str, start: int, end: int, sandbox: str = "") -> dict[str, object]:
    attributes = {"aenv.sandbox_id": sandbox} if sandbox else {}
    return {"trace_id": trace, "span_id": name, "name": name, "start_ns": start,
            "end_ns": end, "attributes": attributes}


async def test_the_sandboxs_traces_become_waterfalls(tmp_path: Path) -> None:
    spans = [_span("t1", "sandbox.create", 0, 2_000_000, "isb-1"),
             _span("t1", "sandbox.restore", 500_000, 1_500_000),
             _span("t2", "sandbox.create", 0, 10, "isb-other"),
             _span("t3", "GET /dashboard/sandboxes", 0, 10, "isb-1")]
    (tmp_path / "nodeagent.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    html = await trace_section(tmp_path, "isb-1")
    assert "Trace t1 (2.0 ms)" in html and "sandbox.restore" in html
    assert "0.5 ms" in html and "1.0 ms" in html  # the restore's offset and length
    assert 'x="75.0" width="150.0"' in html  # a quarter in, half the width
    assert "t2" not in html and "t3" not in html  # another sandbox's; the dashboard's own
    assert "No spans" in await trace_section(tmp_path, "isb-none")
    assert "no span files" in await trace_section(None, "isb-1")
