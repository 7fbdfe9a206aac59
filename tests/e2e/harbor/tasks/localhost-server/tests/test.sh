#!/bin/bash
# Reward 1 when the solution's server still answers on localhost (by name, through /etc/hosts).
got=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://localhost:8000/hello.txt").read().decode(), end="")' 2>&1)
echo "got: $got"
if [ "$got" = "hello from localhost" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
