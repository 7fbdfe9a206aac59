"""`python -m aenv_cli_standins.cleanup NAME`: a service's cleanup; leaves $AENV_HOME/cleaned-NAME
behind to say it ran."""

import os
import sys
from pathlib import Path

Path(os.environ["AENV_HOME"], f"cleaned-{sys.argv[1]}").write_text("cleaned", encoding="utf-8")
