"""The progress bar class every module uses: tqdm's notebook widget where it can be drawn, else the text bar.

`tqdm.auto` makes the same choice, but inside a Jupyter kernel without ipywidgets (a papermill run, a
sandboxed kernel) it warns with a TqdmWarning before falling back to the text bar. Here the fallback is
chosen without the warning: a text bar is the right bar there, not a problem to report.
"""

from __future__ import annotations

import importlib.util
import sys

if "ipykernel.zmqshell" in sys.modules and importlib.util.find_spec("ipywidgets") is not None:
    from tqdm.auto import tqdm
else:
    from tqdm.std import tqdm

__all__ = ["tqdm"]
