"""The judges' modules the baseline agent shares with resenv: the build reader (``buildinfo``: the
extensions it builds are the ones the classifier calls declared), the failure classifier
(``classifier``: its categories are the ones the probes give) and the rule for the repo's own
modules (``localroots``: the modules it never installs are the ones the census counts as the
repo's). All three are stdlib-only.

Imported as part of resenv (the engine, the tests) they are resenv's own modules. Staged into a
sandbox they are loaded as one package, ``resenv_shared``, from beside the script (where the
adapter stages them), or from resenv's source tree (``probes/``) when the script runs from there.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

SHARED_STAGED = "resenv_shared"
"""The package name under which the shared modules are staged beside the script."""
SHARED_MODULES = ("buildinfo", "classifier", "localroots")


def _load_staged() -> tuple[Any, Any, Any]:
    kit = Path(__file__).resolve().parent
    for candidate in (kit.parent / SHARED_STAGED, kit.parents[2] / "probes"):
        if all((candidate / f"{name}.py").is_file() for name in SHARED_MODULES):
            spec = importlib.util.spec_from_file_location(
                SHARED_STAGED, candidate / "__init__.py", submodule_search_locations=[str(candidate)])
            assert spec is not None and spec.loader is not None
            package = importlib.util.module_from_spec(spec)
            sys.modules[SHARED_STAGED] = package  # its modules import each other relatively
            spec.loader.exec_module(package)
            return tuple(importlib.import_module(f"{SHARED_STAGED}.{name}") for name in SHARED_MODULES)
    raise ImportError(f"{SHARED_STAGED}/ is not beside the baseline agent's script: stage both")


if __name__.startswith("resenv."):  # part of resenv: the judges' own modules
    from ....probes import buildinfo, classifier, localroots
else:
    buildinfo, classifier, localroots = _load_staged()
