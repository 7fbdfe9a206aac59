#!/bin/bash
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /app/out
cp -a "$here/data" /app/out/data
cd /app/out/data
find . -type f | sed 's|^\./||' | LC_ALL=C sort | while read -r f; do
  echo "$(sha256sum "$f" | cut -d' ' -f1)  $f"
done > /app/out/manifest.txt
