"""What the kernel finds under /kaggle/input: the one challenges file, whatever the competition folder is called
(trm_kaggle.kaggle.inputs)."""

from __future__ import annotations

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle.inputs import CHALLENGES_NAME, find_challenges


def put(root, rel: str, text: str = "{}"):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("folder", ["arc-prize-2024", "arc-prize-2025", "arc-prize-2026-arc-agi-2", "my-renamed-copy",
                                    "competitions/arc-prize-2026-arc-agi-2"])
def test_finds_the_one_challenges_file_of_any_competition(tmp_path, folder):
    put(tmp_path, "trm-kaggle-wheels/trm_kaggle-0.1.0-py3-none-any.whl")
    put(tmp_path, f"{folder}/arc-agi_evaluation_challenges.json")  # other files of the competition do not count
    want = put(tmp_path, f"{folder}/{CHALLENGES_NAME}")
    assert find_challenges(tmp_path) == want


def test_none_stops_listing_what_it_found(tmp_path):
    put(tmp_path, "arc-prize-2025/arc-agi_evaluation_challenges.json")
    put(tmp_path, "deep/er/still/arc-agi_test_challenges.json")  # three folders down: not looked at
    (tmp_path / "trm-kaggle-weights").mkdir()
    with pytest.raises(TRMError) as e:
        find_challenges(tmp_path)
    msg = str(e.value)
    assert f"no {CHALLENGES_NAME} one or two folders below {tmp_path}" in msg and "CHALLENGES" in msg
    assert "folders: arc-prize-2025/, deep/, trm-kaggle-weights/" in msg
    assert "arc-prize-2025/arc-agi_evaluation_challenges.json" in msg


def test_several_stop_listing_them(tmp_path):
    put(tmp_path, f"arc-prize-2025/{CHALLENGES_NAME}", '{"a": {}}')  # different bytes: copies would be one file
    put(tmp_path, f"competitions/arc-prize-2026-arc-agi-2/{CHALLENGES_NAME}", '{"b": {}}')
    with pytest.raises(TRMError) as e:
        find_challenges(tmp_path)
    msg = str(e.value)
    assert msg.startswith(f"2 files named {CHALLENGES_NAME}") and "set CHALLENGES" in msg
    assert f"arc-prize-2025/{CHALLENGES_NAME}" in msg and f"competitions/arc-prize-2026-arc-agi-2/{CHALLENGES_NAME}" in msg


def test_of_several_the_kernels_own_competition_wins(tmp_path):
    put(tmp_path, f"arc-prize-2025/{CHALLENGES_NAME}", '{"a": {}}')
    own = put(tmp_path, f"competitions/arc-prize-2026-arc-agi-2/{CHALLENGES_NAME}", '{"b": {}}')
    assert find_challenges(tmp_path, "arc-prize-2026-arc-agi-2") == own
    with pytest.raises(TRMError, match="2 files named"):  # a competition whose folder is not there: no guess
        find_challenges(tmp_path, "arc-prize-2024")


def test_missing_root(tmp_path):
    with pytest.raises(TRMError, match="is not a directory"):
        find_challenges(tmp_path / "nope")


def test_copies_with_the_same_bytes_are_one_file_and_said_once(tmp_path):
    """One competition mounted in both layouts (byte-identical copies) was "2 files named ...": no challenges
    file at all. The copies are one file, the first by path taken; a copy beside another competition's different
    file still counts once, and the kernel's competition wins."""
    first = put(tmp_path, f"arc-prize-2026-arc-agi-2/{CHALLENGES_NAME}", '{"a": {}}')
    put(tmp_path, f"competitions/arc-prize-2026-arc-agi-2/{CHALLENGES_NAME}", '{"a": {}}')
    assert find_challenges(tmp_path, "arc-prize-2026-arc-agi-2") == first
    said: list[str] = []
    assert find_challenges(tmp_path, echo=said.append) == first  # without a competition too: the first by path
    assert len(said) == 1 and said[0].startswith(f"2 copies of {CHALLENGES_NAME} with the same bytes"), said
    put(tmp_path, f"arc-prize-2025/{CHALLENGES_NAME}", '{"b": {}}')
    assert find_challenges(tmp_path, "arc-prize-2026-arc-agi-2") == first
    with pytest.raises(TRMError, match="2 files named .* \\(copies with the same bytes counted once\\)"):
        find_challenges(tmp_path, "arc-prize-2024")
