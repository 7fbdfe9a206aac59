#!/usr/bin/env bash
# Installs the npm tools (buf, the e2b JS SDK) into node_modules. Idempotent. Its one-line summary
# also goes to $AENV_STEP_SUMMARY (scripts/setup-step.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
stamp=node_modules/.aenv-deps
want=$(sha256sum package.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "up to date" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
  exit 0
fi
npm install --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
echo "installed package.json's tools" | tee -a "${AENV_STEP_SUMMARY:-/dev/null}"
