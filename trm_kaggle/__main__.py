import sys

from trm_kaggle.console import run

sys.exit(run())
