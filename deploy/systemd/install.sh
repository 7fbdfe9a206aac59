#!/usr/bin/env bash
# Installs aenv as systemd services on this host: the node's Debian packages (the image's list,
# deploy/docker/packages.txt), a venv in /opt/aenv/venv with every aenv package, the units, and
# /etc/aenv/aenv.env (kept if it exists). Then starts aenv.target. pip uses this host's settings
# (an offline host: no-index and find-links in /etc/pip.conf, as the machine of
# tests/deploy/test_systemd_nspawn.py has).
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

# apt's and pip's output goes to a log (setuptools' warnings would bury an error); a failing
# step prints the log's end.
log=${AENV_INSTALL_LOG:-$destdir/var/log/aenv-install.log}
mkdir -p "$(dirname "$log")"
logged() {
  "$@" >>"$log" 2>&1 || { echo "install.sh: '$*' failed; the end of $log:" >&2
    tail -40 "$log" >&2; return 1; }
}

if [ "$packages" = 1 ]; then
  missing=()
  while read -r p; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$p")
  done < <(grep -v '^#' "$repo/deploy/docker/packages.txt")
  if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    echo "install.sh: installing ${missing[*]}"
    logged apt-get update -qq
    logged apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

if [ "$venv" = 1 ]; then
  prefix=$destdir/opt/aenv/venv
  echo "install.sh: aenv's venv in $prefix (log: $log)"
  [ -x "$prefix/bin/python" ] || python3.11 -m venv "$prefix"
  logged "$prefix/bin/pip" install -q --upgrade pip setuptools wheel
  # aenv's packages are built from a copy in /opt/aenv/src (setuptools writes into the tree it
  # builds, and the checkout may be read-only). The protos, envd and the code interpreter go onto
  # every guest's tools disk as source trees (found through their import paths, keyed by their
  # contents): installed editable from that copy, so the venv needs nothing of the checkout.
  src=$destdir/opt/aenv/src
  rm -rf "$src"
  for tree in gen/python common services/envd services/codeinterp services/snapstore \
      services/scheduler services/nodeagent services/gateway clients/python cli; do
    mkdir -p "$src/$tree"
    tar -C "$repo/$tree" --exclude=__pycache__ --exclude='*.egg-info' --exclude=build \
      -c . | tar -C "$src/$tree" -x
  done
  logged "$prefix/bin/pip" install -q -e "$src/gen/python" -e "$src/services/envd" \
    -e "$src/services/codeinterp" "$src/common" \
    "$src/services/snapstore" "$src/services/scheduler" "$src/services/nodeagent" \
    "$src/services/gateway" "$src/clients/python" "$src/cli"
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
  # Debian's etcd-server starts its own etcd on 127.0.0.1:2379, the port aenv-etcd serves.
  if systemctl cat etcd.service >/dev/null 2>&1; then
    systemctl disable --now etcd.service
  fi
  systemctl daemon-reload
  systemctl enable --now aenv.target
  echo "aenv started. API key: /var/lib/aenv/api-key; status: systemctl status 'aenv-*'"
fi
