"""What every bad-input test checks of the command line: one `error:` line, and for bad input status 2."""

from __future__ import annotations


def one_error_line(capsys, rc: int | None = None) -> str:
    """The one `error:` line on stderr (warnings and notes aside), with no traceback; with `rc`, the status was 2
    (bad input, nothing written). Returns the line."""
    err = capsys.readouterr().err
    if rc is not None:
        assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("WARNING:", "note:"))]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]
