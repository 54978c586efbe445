"""A training kernel that could not train is refused at build time: `--train-budget` at or below the kernel's
save margin (SAVE_MARGIN, the notebook's default) is one line, before anything is built or pushed."""

from __future__ import annotations

import re

from trm_kaggle.kaggle import bundle
from trm_kaggle.kaggle.metadata import REPO_ROOT
from trm_kaggle.kaggle.train_kernel import DEFAULT_MARGIN
from trm_kaggle.kaggle_training import DEFAULT_MARGIN as SESSION_MARGIN


def test_a_train_budget_inside_the_save_margin_is_refused_before_building(tmp_path, capsys):
    src = (REPO_ROOT / "notebooks" / "kaggle_train.py").read_text()
    # the margin the check uses is the kernel's own
    assert float(re.search(r"^SAVE_MARGIN = (\S+)", src, re.M)[1]) == DEFAULT_MARGIN == SESSION_MARGIN
    for budget in ("300", "600", "nan"):
        rc = bundle.main([str(tmp_path / "out"), "--train-kernel", "--preset", "sudoku4-cpu", "--train-budget",
                          budget, "--no-download"])
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert rc != 0 and len(err) == 1 and "leaves no time to train" in err[0], err
        assert "SAVE_MARGIN" in err[0] and not (tmp_path / "out").exists()
