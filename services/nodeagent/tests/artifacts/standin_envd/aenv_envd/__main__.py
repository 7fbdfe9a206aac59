"""Serve GET /health with 204 (and GET /env with envd's environment, to check nothing leaks)."""

from __future__ import annotations

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_response(204)
            self.end_headers()
            return
        if self.path == "/env":
            body = json.dumps({"env": dict(os.environ), "pid": os.getpid(),
                               "executable": sys.executable}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_error(404)


if __name__ == "__main__":
    print("envd-standin: listening on 0.0.0.0:49983", flush=True)
    ThreadingHTTPServer(("0.0.0.0", 49983), Handler).serve_forever()
