"""`trm_kaggle.outputs`: the folders other commands keep, refused to every command that builds its own files there."""

from __future__ import annotations

import pytest

from trm_kaggle import outputs


@pytest.mark.parametrize("record, words", [
    ("session.json", "holds session.json, the record of a Kaggle training session"),
    (".trm_kaggle_jobs", "is a launch's folder (it holds .trm_kaggle_jobs)"),
])
def test_a_folder_inside_a_sessions_output_or_a_launchs_folder_is_anothers(tmp_path, record, words):
    """`build_bundle.py K/s1/sub` (K/s1 a Kaggle training session's output) built a second data dataset among the
    next session's inputs, exit 0, where K/s1 itself was refused; a launch's folder, or one inside it, took a bundle
    among its job files while a training session refused it as its working folder."""
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / record).write_text("{}")
    said = outputs.others_output_problem(kept, "OUT_DIR")
    assert said is not None and said.startswith(f"OUT_DIR {kept} {words}"), said
    for inside in (kept / "sub", kept / "a" / "b"):
        said = outputs.others_output_problem(inside, "OUT_DIR")
        assert said is not None and said.startswith(f"OUT_DIR {inside} lies inside {kept}, which "), said
        assert words.split(" ", 1)[1] in said and said.endswith(("choose a folder of its own",
                                                                    "choose another OUT_DIR")), said
    assert outputs.others_output_problem(tmp_path / "beside", "OUT_DIR") is None
