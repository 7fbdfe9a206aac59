#!/bin/bash
set -euo pipefail
cat > /app/fib.py <<'PY'
def fib(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
PY
