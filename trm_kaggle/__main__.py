import sys

from trm_kaggle.cli import main

sys.exit(main())
