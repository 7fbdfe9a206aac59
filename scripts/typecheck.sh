#!/usr/bin/env bash
# mypy --strict over every component. Each component (its package and its tests) is checked in
# its own run: their test folders are all called `tests`, which one run would see as one package.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mypy=${MYPY:-.venv/bin/mypy}
status=0
for component in common testing services/gateway services/scheduler services/nodeagent services/snapstore \
    services/envd services/codeinterp clients/python cli; do
  echo "mypy: $component"
  $mypy "$component" || status=1
done
echo "mypy: tests bench examples"
$mypy tests bench examples || status=1
exit $status
