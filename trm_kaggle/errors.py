"""The one exception type users see.

Anything raised as `TRMError` is a problem with the user's input or environment,
reported by the CLI as a single line (no traceback) with a non-zero exit code.
Everything else is a bug and keeps its traceback.
"""


class TRMError(Exception):
    """A problem the user can fix: bad input file, wrong flag, missing path."""


class DataError(TRMError):
    """Malformed task or dataset content. The message names the file, task and problem."""
