#!/usr/bin/env bash
# Installs the npm tools (buf, the e2b JS SDK) into node_modules. Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
stamp=node_modules/.aenv-deps
want=$(sha256sum package.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
npm install --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
