#!/usr/bin/env bash
# Regenerates gen/python/src from protos/ (messages, type stubs, grpc.aio stubs). buf guards the
# protos (lint, breaking); generation uses the protoc bundled in grpcio-tools so no protoc binary is
# needed. Output is deterministic, which `tests/test_generated_in_sync.py` relies on.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
out=${1:-$root/gen/python/src}
rm -rf "$out"
mkdir -p "$out"
cd "$root/protos"
mapfile -t files < <(find . -name '*.proto' | sed 's#^\./##' | LC_ALL=C sort)
"$python" -m grpc_tools.protoc -I . \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" "${files[@]}"
# Namespace-free packages: every generated directory is a regular package.
find "$out" -mindepth 1 -type d -exec sh -c 'touch "$1/__init__.py"' _ {} \;
