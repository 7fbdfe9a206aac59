#!/usr/bin/env bash
# The host's own apt source files, one path a line, for mmdebstrap to build a Debian tree from
# the mirrors this host is configured for (deploy/docker/build.sh, scripts/setup-nspawn.sh).
# Fails when the host has none.
set -euo pipefail
found=0
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  if [ -s "$f" ]; then
    echo "$f"
    found=1
  fi
done
[ "$found" = 1 ] || { echo "no apt sources on this host" >&2; exit 1; }
