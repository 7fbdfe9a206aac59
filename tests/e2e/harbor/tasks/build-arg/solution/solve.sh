#!/bin/bash
set -euo pipefail
echo "$(cat /etc/greeting) $APP_MODE" > /app/answer.txt
