"""`python -m aenv_cli_standins.crash`: a service that fails during start-up, saying why."""

import sys

print("standin: loading configuration")
print("standin: fatal: cannot open /dev/imaginary: no such device", file=sys.stderr)
sys.exit(3)
