"""The offline Kaggle bundle as a whole: `build_bundle` and the build_bundle.py command line.

Each part has its own tests beside its module (test_metadata, test_wheels, test_weights_dataset, test_kernel,
test_push, test_sandbox); the bundle they share is built once by the fixtures in conftest.py.
"""

from __future__ import annotations

from trm_kaggle.kaggle import bundle as B


def test_missing_notebook_fails_clearly(inputs, tmp_path, capsys):
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(inputs["export"]),
                 "--notebook", str(tmp_path / "nope.ipynb")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nope.ipynb does not exist" in err and "--notebook" in err
    assert not (tmp_path / "out" / "wheels").exists()


def test_weights_must_be_an_export(inputs, tmp_path, capsys):
    (tmp_path / "notexport").mkdir()
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(tmp_path / "notexport"),
                 "--notebook", str(inputs["notebook"])])
    assert rc == 2 and "not an export" in capsys.readouterr().err
