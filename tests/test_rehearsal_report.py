"""The report of a rehearsal run: written whatever the sandbox's challenges file holds."""
from __future__ import annotations

from trm_kaggle.kaggle.rehearsal import challenge_count


def test_a_challenges_file_the_package_refuses_is_counted_never_raised(tmp_path):
    """A task id written twice (planted by `execute(alter=...)`): the report re-read the file with the package's
    reader and raised DataError after the run instead of reporting it. Counted as the kernel's first cell reads it."""
    task = '{"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}'
    path = tmp_path / "arc-agi_test_challenges.json"
    path.write_text(f'{{"aaaa0001": {task}, "aaaa0002": {task}, "aaaa0001": {task}}}')
    assert challenge_count(path) == 2
    path.write_text("not json")
    assert challenge_count(path) is None
