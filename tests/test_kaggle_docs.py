"""What docs/kaggle.md must tell a first-time submitter: join the competition before pushing a kernel that
attaches it, and the CLI's submit line for a kernel version."""

from __future__ import annotations

from pathlib import Path

DOC = (Path(__file__).resolve().parents[1] / "docs" / "kaggle.md").read_text()


def test_the_kaggle_page_says_join_first_and_gives_the_submit_line():
    text = " ".join(DOC.split())
    assert "Join the competition first." in text and "can be pushed only by an account that has joined it" in text
    assert ("`kaggle competitions submit -k USER/KERNEL -v N -f submission.json -m MSG COMPETITION`" in text)
    assert "kaggle competitions submit -k YOU/trm-kaggle-submission -v 1 -f submission.json" in DOC
