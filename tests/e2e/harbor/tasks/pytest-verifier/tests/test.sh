#!/bin/bash
# pytest's verdict is the reward (the file is named so the repository's own pytest run skips it).
cd /app
if python3 -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/check_fib.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
