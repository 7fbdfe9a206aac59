#!/usr/bin/env bash
# Installs aenv as systemd services on this host: Debian packages, a venv in /opt/aenv/venv with
# every aenv package, the units, and /etc/aenv/aenv.env (kept if it exists). Then starts aenv.target.
#
#   sudo deploy/systemd/install.sh [--no-start] [--no-packages]
#
# DESTDIR=/some/root installs the files under that root instead (packaging, tests); it implies
# --no-start and --no-packages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
destdir=${DESTDIR:-}
start=1
packages=1
venv=1
for arg in "$@"; do
  case "$arg" in
    --no-start) start=0 ;;
    --no-packages) packages=0 ;;
    --no-venv) venv=0 ;;
    *) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
if [ -n "$destdir" ]; then start=0; packages=0; fi

if [ "$packages" = 1 ]; then
  bash "$repo/scripts/setup-host.sh"
fi

if [ "$venv" = 1 ]; then
  prefix=$destdir/opt/aenv/venv
  [ -x "$prefix/bin/python" ] || python3.11 -m venv "$prefix"
  "$prefix/bin/pip" install -q --upgrade pip setuptools wheel
  "$prefix/bin/pip" install -q "$repo/gen/python" "$repo/common" "$repo/services/envd" \
    "$repo/services/codeinterp" \
    "$repo/services/snapstore" "$repo/services/scheduler" "$repo/services/nodeagent" \
    "$repo/services/gateway" "$repo/clients/python" "$repo/cli"
fi

install -d -m 0755 "$destdir/etc/systemd/system" "$destdir/etc/aenv"
install -d -m 0750 "$destdir/var/lib/aenv"
for unit in "$here"/aenv.target "$here"/aenv-*.service; do
  install -m 0644 "$unit" "$destdir/etc/systemd/system/$(basename "$unit")"
done
if [ ! -e "$destdir/etc/aenv/aenv.env" ]; then
  install -m 0640 "$here/aenv.env" "$destdir/etc/aenv/aenv.env"
fi

if [ "$start" = 1 ]; then
  systemctl daemon-reload
  systemctl enable --now aenv.target
  echo "aenv started. API key: /var/lib/aenv/api-key; status: systemctl status 'aenv-*'"
fi
