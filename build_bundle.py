#!/usr/bin/env python
"""Build the offline Kaggle bundle (wheels + weights datasets, submission kernel).

    python build_bundle.py OUT_DIR [--weights EXPORT_DIR] [--no-download] [--execute] [--push]

All logic lives in `trm_kaggle.kaggle.bundle` (the command line; each part in a module beside it, listed in its
docstring); `python build_bundle.py --help` lists the options.
"""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # this checkout's trm_kaggle, installed or not
    from trm_kaggle.console import run  # standard library only: SIGTERM and Ctrl-C are one line from here on

    sys.exit(run("build_bundle.py"))
