#!/usr/bin/env bash
# Harbor (Laude's agent-eval harness) in a venv of its own, for tests/e2e/harbor and
# bench/harbor_trials.py: it needs Python >= 3.12, the platform's venv is 3.11. Installed from the
# machine's pip configuration. Idempotent: skipped when the pin has not changed since the last
# successful run. Its one-line summary also goes to $AENV_STEP_SUMMARY (scripts/setup-step.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv/harbor
pin="harbor[e2b]==0.26.0"
stamp=$venv/.aenv-harbor
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pin" ]; then
  echo "$pin present" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
  exit 0
fi

# pyenv's python3.12 shim needs PYENV_VERSION; the interpreter itself does not.
python=""
for v in 3.12 3.13; do
  for candidate in "$HOME"/.pyenv/versions/"$v".*/bin/python"$v" "$(command -v "python$v" || true)"; do
    if [ -x "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' \
        2>/dev/null; then
      python=$candidate
      break 2
    fi
  done
done
if [ -z "$python" ]; then
  echo "setup-harbor: no Python >= 3.12 found (Harbor needs one)" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q "$pin"
echo "$pin" > "$stamp"
echo "installed $pin" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
