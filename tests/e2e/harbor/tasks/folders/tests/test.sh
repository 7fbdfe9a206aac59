#!/bin/bash
# The uploaded folders (/solution's data and /tests' expected manifest) arrived whole.
if diff -u /tests/expected-manifest.txt /app/out/manifest.txt \
    && [ -d /app/out/data/empty ] && [ -x /tests/test.sh ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
