"""A subpackage's public face: the names other layers may import from it, each read from the module that
defines it on first use (PEP 562). Importing one name costs only its own module, so a command that needs no
torch still imports none.

A package's `__init__.py` lists its public names in `_EXPORTS` (name -> defining module, relative to the
package) and its public modules in `_MODULES`, then calls `lazy_face`. Everything else in the package is
private to it; `tests/test_layering.py` holds every other layer (and `benchmarks/`) to the faces.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_face(package: str, exports: dict[str, str], modules: tuple[str, ...] = ()
              ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """(`__all__`, `__getattr__`, `__dir__`) of the package named `package`."""
    names = sorted(exports) + sorted(modules)

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where}"), name)  # not cached: a monkeypatch holds

    def __dir__() -> list[str]:
        return names

    return names, __getattr__, __dir__
