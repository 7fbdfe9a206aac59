"""Serve GET /health with 204 (and GET /env with envd's environment, to check nothing leaks;
GET /kernel with the guest's loaded modules and filesystem types, to check the initramfs)."""

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
        if self.path == "/kernel":
            with open("/proc/modules") as modules, open("/proc/filesystems") as filesystems:
                body = json.dumps({"modules": [line.split()[0] for line in modules],
                                   "filesystems": [line.split()[-1] for line in filesystems]}
                                  ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_error(404)


if __name__ == "__main__":
    print("envd-standin: listening on 0.0.0.0:49983", flush=True)
    ThreadingHTTPServer(("0.0.0.0", 49983), Handler).serve_forever()
