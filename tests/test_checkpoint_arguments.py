"""The run-folder functions of `trm_kaggle.train.checkpoint`, called from Python with an argument of the wrong type:
a TypeError naming it, as `train` does for its own (None and 5 were pathlib's "expected str, bytes or os.PathLike
object", naming no argument)."""

import pytest

from trm_kaggle.train import checkpoint as ckpt


@pytest.mark.parametrize("call", [ckpt.list_states, ckpt.load_newest_state, ckpt.newest_step])
@pytest.mark.parametrize("wrong, said", [(None, "NoneType"), (5, "int"), (b"run", "bytes")])
def test_a_run_folder_that_is_no_path_is_named(call, wrong, said):
    with pytest.raises(TypeError, match=rf"^run_dir: expected a run folder's path \(a str or os.PathLike\), got "
                                        rf"{said}$"):
        call(wrong)


def test_a_path_of_either_kind_is_taken(tmp_path):
    (tmp_path / "state_step00000002.pt").touch()
    assert ckpt.list_states(tmp_path) == ckpt.list_states(str(tmp_path)) == [tmp_path / "state_step00000002.pt"]


@pytest.mark.parametrize("args, said", [
    ((5, "out"), r"^run: expected a run folder's or train state's path \(a str or os.PathLike\), got int$"),
    ((None, "out"), r"^run: expected .*got NoneType$"),
    (("run", 5), r"^out: expected an export folder's path \(a str or os.PathLike\), got int$"),
])
def test_export_run_names_a_path_argument_of_the_wrong_type(tmp_path, args, said):
    """5 as the run was os.fspath's "expected str, bytes or os.PathLike object, not int", naming no argument."""
    with pytest.raises(TypeError, match=said):
        ckpt.export_run(*args)
