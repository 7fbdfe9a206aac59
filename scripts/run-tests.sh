#!/usr/bin/env bash
# Runs pytest once per component (their test folders are all packages named `tests`, which one
# pytest run would import as one package) and prints one closing line for all of them.
# Extra arguments go to every run, e.g. `-m "not vm"`, except `--prepare-deployments`: it builds
# what the docker and nspawn tests need (scripts/prepare-deployments.sh) in the background while
# the components before `tests` run, and waits for it before `tests`.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pytest=${PYTEST:-.venv/bin/pytest}
reports=$(mktemp -d)
prepare=0
args=()
for arg in "$@"; do
  if [ "$arg" = --prepare-deployments ]; then prepare=1; else args+=("$arg"); fi
done
preparing=
trap '[ -z "$preparing" ] || kill -- -"$preparing" 2>/dev/null; rm -rf "$reports"' EXIT
if [ $prepare -eq 1 ]; then
  # Its own process group (set -m), so an interrupted run ends the builds it started too.
  set -m
  SETUP_LOG="$root/build/deployments.log" nice -n 19 ionice -c 2 -n 7 \
    bash scripts/setup-step.sh deployments bash scripts/prepare-deployments.sh \
    > "$reports/prepare.out" 2>&1 &
  preparing=$!
  set +m
fi
status=0
components=(common/tests testing/tests services/envd/tests services/snapstore/tests services/scheduler/tests
            services/nodeagent/tests services/gateway/tests services/codeinterp/tests clients/python/tests
            cli/tests tests)
for component in "${components[@]}"; do
  name=$(echo "$component" | tr '/' '_')
  if [ "$component" = tests ] && [ -n "$preparing" ]; then
    wait "$preparing" || echo "(the docker and nspawn tests will build what is missing themselves)"
    preparing=
    cat "$reports/prepare.out"
  fi
  echo "=== $component"
  "$pytest" -p no:cacheprovider "$component" --junitxml="$reports/$name.xml" "${args[@]}"
  rc=$?
  # 5: nothing selected in this component (e.g. under a marker filter) is not a failure.
  if [ $rc -ne 0 ] && [ $rc -ne 5 ]; then status=1; fi
done
"$(dirname "$pytest")/python" - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for report in pathlib.Path(sys.argv[1]).glob("*.xml"):
    for suite in ET.parse(report).getroot().iter("testsuite"):
        for key in totals:
            totals[key] += int(suite.get(key, 0))
failed = totals["failures"] + totals["errors"]
passed = totals["tests"] - failed - totals["skipped"]
print(f"all components: {passed} passed, {failed} failed, {totals['skipped']} skipped")
PY
exit $status
