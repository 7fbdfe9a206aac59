"""An E2B SDK program configured the way most self-hosted users configure it: E2B_API_KEY and
E2B_DOMAIN only (plus SSL_CERT_FILE for the node's own CA). It reaches the platform through DNS
and TLS alone: `https://api.<domain>` and `https://<port>-<id>.<domain>`.

Prints one JSON line of what it saw; the test checks it.
"""

from __future__ import annotations

import json
import os
import socket
import time

import httpx
from e2b import Sandbox

APP_PORT = 8000


def fetch(url: str, deadline_s: float) -> httpx.Response:
    """GET until the app answers 200 (its server may still be starting)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            resp = httpx.get(url, timeout=30)
            if resp.status_code == 200 or time.monotonic() > deadline:
                return resp
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def main() -> None:
    assert not any(name in os.environ for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DEBUG"))
    domain = os.environ["E2B_DOMAIN"]
    seen: dict[str, object] = {"api_address": socket.gethostbyname(f"api.{domain}")}
    sandbox = Sandbox.create(timeout=300, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        seen["sandbox_address"] = socket.gethostbyname(f"49983-{sandbox.sandbox_id}.{domain}")
        seen["echo"] = sandbox.commands.run("echo hello from the guest").stdout
        sandbox.files.write("/srv/index.html", "served by the guest app\n", user="root")
        sandbox.commands.run(f"cd /srv && python3 -m http.server {APP_PORT}", background=True)
        host = sandbox.get_host(APP_PORT)
        seen["host"] = host
        seen["app"] = fetch(f"https://{host}/index.html", 60).text
        sandbox.pause()
        seen["paused_state"] = Sandbox.get_info(sandbox.sandbox_id).state
        # A plain HTTP request to the paused sandbox's app wakes it (auto_resume).
        resumed = fetch(f"https://{host}/index.html", 120)
        seen["after_resume"] = [resumed.status_code, resumed.text]
        seen["resumed_state"] = Sandbox.get_info(sandbox.sandbox_id).state
        seen["sandbox_id"] = sandbox.sandbox_id
    finally:
        sandbox.kill()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
