#!/bin/bash
# The ARG held during the build (its RUN saw it); at run time, as under Docker, only the ENV does.
if [ "$(cat /app/answer.txt)" = "hello-from-arg production" ] && [ -z "${GREETING+set}" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "answer: $(cat /app/answer.txt); GREETING=${GREETING-<unset>}"
  echo 0 > /logs/verifier/reward.txt
fi
