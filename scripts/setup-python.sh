#!/usr/bin/env bash
# Creates .venv with every aenv package (editable) and the dev tools. Idempotent: skipped when the
# dependency declarations have not changed since the last successful run. Its one-line summary
# also goes to $AENV_STEP_SUMMARY (scripts/setup-step.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=.venv
stamp=$venv/.aenv-deps
want=$(cat requirements-dev.txt common/pyproject.toml testing/pyproject.toml gen/python/pyproject.toml \
  services/*/pyproject.toml cli/pyproject.toml \
  clients/python/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "up to date" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
  exit 0
fi
[ -x $venv/bin/python ] || python3.11 -m venv $venv 2>/dev/null || python3 -m venv $venv
$venv/bin/pip install -q --upgrade pip setuptools wheel
pip_out=$(mktemp)
trap 'rm -f "$pip_out"' EXIT
$venv/bin/pip install -r requirements-dev.txt \
  -e gen/python -e common -e testing \
  -e services/envd -e services/snapstore -e services/scheduler -e services/nodeagent \
  -e services/gateway -e services/codeinterp -e clients/python -e cli | tee "$pip_out"
echo "$want" > "$stamp"
# pip's last word: "Successfully installed a-1.0 b-2.0 ..." (absent when nothing was new).
installed=$(grep '^Successfully installed ' "$pip_out" | tr ' ' '\n' | tail -n +3 | grep -c . || true)
echo "installed $installed packages" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
