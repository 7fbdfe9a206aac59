#!/bin/bash
# The server outlives this command: Harbor's verifier runs later, in another command.
set -euo pipefail
echo "hello from localhost" > /srv/www/hello.txt
setsid nohup python3 -m http.server 8000 --bind localhost --directory /srv/www \
  > /tmp/server.log 2>&1 < /dev/null &
for _ in $(seq 1 100); do
  python3 -c 'import urllib.request; urllib.request.urlopen("http://localhost:8000/")' \
    2>/dev/null && exit 0
  sleep 0.1
done
cat /tmp/server.log
exit 1
