"""`python -m trm_kaggle.cli`: the same command as `python -m trm_kaggle`."""

import sys

from trm_kaggle.cli import main

sys.exit(main())
