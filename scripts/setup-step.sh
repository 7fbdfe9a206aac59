#!/usr/bin/env bash
# Runs one set-up step quietly: `setup-step.sh NAME COMMAND [ARG...]`.
#
# The command's output (pip, apt, npm, mmdebstrap) goes to the set-up log, SETUP_LOG (default
# build/setup.log), under a header naming the step; the terminal gets one line, `NAME: SUMMARY
# (N.N s)`, SUMMARY being what the command wrote to the file named by $AENV_STEP_SUMMARY ("ok" if
# nothing). A failing command gets its part of the log's tail printed, with the log's path, and
# its exit status passed on, so make stops there.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: setup-step.sh NAME COMMAND [ARG...]" >&2
  exit 2
fi
name=$1
shift
root=$(cd "$(dirname "$0")/.." && pwd)
log=${SETUP_LOG:-$root/build/setup.log}
tail_lines=${SETUP_TAIL_LINES:-40}
mkdir -p "$(dirname "$log")"
# One generation kept: the log is appended to by every run, and must not grow without bound.
if [ -f "$log" ] && [ "$(stat -c %s "$log")" -gt $((8 * 1024 * 1024)) ]; then
  mv -f "$log" "$log.1"
fi
touch "$log"
first=$(($(wc -l < "$log") + 2))  # this step's lines start after its header
printf '=== %s %s: %s\n' "$(date -u +%FT%TZ)" "$name" "$*" >> "$log"
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
started=$EPOCHREALTIME
AENV_STEP_SUMMARY=$summary "$@" >> "$log" 2>&1
rc=$?
seconds=$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
if [ $rc -eq 0 ]; then
  said=$(head -n 1 "$summary")
  echo "$name: ${said:-ok} ($seconds s)"
  exit 0
fi
{
  echo "$name: FAILED (exit $rc after $seconds s); the end of its output:"
  tail -n +"$first" "$log" | tail -n "$tail_lines" | sed 's/^/  | /'
  echo "$name: its full output is in $log"
} >&2
exit $rc
