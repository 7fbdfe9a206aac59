#!/usr/bin/env bash
# Creates .venv with every aenv package (editable) and the dev tools. Idempotent: skipped when the
# dependency declarations have not changed since the last successful run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=.venv
stamp=$venv/.aenv-deps
want=$(cat requirements-dev.txt common/pyproject.toml testing/pyproject.toml gen/python/pyproject.toml \
  services/*/pyproject.toml cli/pyproject.toml \
  clients/python/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x $venv/bin/python ] || python3.11 -m venv $venv 2>/dev/null || python3 -m venv $venv
$venv/bin/pip install -q --upgrade pip setuptools wheel
$venv/bin/pip install -q -r requirements-dev.txt \
  -e gen/python -e common -e testing \
  -e services/envd -e services/snapstore -e services/scheduler -e services/nodeagent \
  -e services/gateway -e services/codeinterp -e clients/python -e cli
echo "$want" > "$stamp"
