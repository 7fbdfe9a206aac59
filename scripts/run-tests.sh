#!/usr/bin/env bash
# Runs pytest once per component (their test folders are all packages named `tests`, which one
# pytest run would import as one package) and prints one closing line for all of them.
# Extra arguments go to every run, e.g. `-m "not vm"`.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pytest=${PYTEST:-.venv/bin/pytest}
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
status=0
components=(common/tests testing/tests services/envd/tests services/snapstore/tests services/scheduler/tests
            services/nodeagent/tests services/gateway/tests services/codeinterp/tests clients/python/tests
            cli/tests tests)
for component in "${components[@]}"; do
  name=$(echo "$component" | tr '/' '_')
  echo "=== $component"
  "$pytest" -p no:cacheprovider "$component" --junitxml="$reports/$name.xml" "$@"
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
