"""A user's methods, tasks and rewards reach every command: plugin modules and the ``rlvr_lib.plugins`` entry points.

A plugin is a Python module that registers what it defines when it is imported (`rlvr_lib.methods.register_method`,
`rlvr_lib.tasks.register_task`, a reward's registry). Three ways bring one in before a name is resolved:

* ``--import MODULE`` on any command of ``python -m rlvr_lib`` (repeatable): a module name on ``sys.path``
  (``my_pkg.methods``) or a path to a ``.py`` file (``./lenpen.py``); `import_plugins`.
* ``imports: [MODULE, ...]`` in a config file (``train --config``), imported the same way.
* An installed package's entry points in the group :data:`ENTRY_POINT_GROUP` (``rlvr_lib.plugins``), e.g. in its
  ``pyproject.toml``::

      [project.entry-points."rlvr_lib.plugins"]
      my_methods = "my_pkg.methods"            # a module: importing it registers
      my_tasks = "my_pkg.tasks:register"       # a callable: called once, with no argument

  They are loaded once, lazily: the first time a method, task or reward name is looked up and is not registered
  (`load_entry_points`), so a command that names only the library's own never imports them.

A name that is still missing is refused with `missing_name`'s one line: what is registered and how to import one.
This module imports nothing of the library, so every registry can call it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

__all__ = ["ENTRY_POINT_GROUP", "HOW_TO_IMPORT", "PluginError", "import_plugin", "import_plugins",
           "load_entry_points", "loaded_entry_points", "missing_name"]

ENTRY_POINT_GROUP = "rlvr_lib.plugins"
"""The entry-point group an installed package declares its plugin modules (or registering callables) in."""

HOW_TO_IMPORT = ("import the module that registers it with --import MODULE (a module name or a .py path; "
                 "`imports: [...]` in a config file), or install a package declaring it in the entry-point group "
                 f"{ENTRY_POINT_GROUP!r}")
"""How to bring a name in, as every missing-name error says it."""


class PluginError(ValueError):
    """A plugin could not be imported or loaded: one line naming it and the cause."""


_LOCK = threading.RLock()
_ENTRY_POINTS_LOADED = False
_LOADED: list[str] = []


def missing_name(kind: str, name: object, registered: Iterable[str]) -> ValueError:
    """The one-line error for a ``kind`` (``"method"``, ``"task"``, ``"reward"``) named ``name`` that is not
    registered: ``"<kind>='x' is not registered: must be one of [...]; <HOW_TO_IMPORT>"``."""
    return ValueError(f"{kind}={name!r} is not registered: must be one of {sorted(registered)}; to add one, "
                      f"{HOW_TO_IMPORT}")


def _module_name_for(path: Path) -> str:
    """The module name a ``.py`` file is imported under: its stem when that is an identifier no module has taken,
    else ``rlvr_lib_plugin_<stem>_<n>``."""
    stem = path.stem
    if stem.isidentifier() and stem not in sys.modules:
        return stem
    base = "rlvr_lib_plugin_" + "".join(c if c.isalnum() else "_" for c in stem)
    n = 0
    while f"{base}_{n}" in sys.modules:
        n += 1
    return f"{base}_{n}"


_FILES: dict[Path, ModuleType] = {}


def import_plugin(spec: str) -> ModuleType:
    """Import one plugin: a module name (``"my_pkg.methods"``) or a path to a ``.py`` file; returns the module.

    A file is imported once per process (again naming it returns the same module), under its stem's name, and its
    folder is not added to ``sys.path``. Raises `PluginError` (one line) when the module is not found or fails to
    import (the cause's type and message)."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"plugin {spec!r} is invalid: must be a module name or a path to a .py file")
    spec = spec.strip()
    looks_like_file = spec.endswith(".py") or "/" in spec or "\\" in spec
    if looks_like_file:
        path = Path(spec).expanduser().resolve()
        if not path.is_file() or path.suffix != ".py":
            why = "no such file" if not path.exists() else "not a .py file"
            raise PluginError(f"plugin {spec!r} is invalid: must be a module name or a path to a .py file ({why})")
        if path in _FILES:
            return _FILES[path]
        name = _module_name_for(path)
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[name]
            raise PluginError(f"plugin {spec!r} failed to import: {type(err).__name__}: "
                              f"{' '.join(str(err).split())}") from err
        _FILES[path] = module
        return module
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as err:
        if err.name is not None and spec.startswith(err.name):
            raise PluginError(f"plugin {spec!r} is invalid: no module named {err.name!r} on sys.path (pass a path "
                              "to a .py file, or install the package / add its folder to PYTHONPATH)") from None
        raise PluginError(f"plugin {spec!r} failed to import: {type(err).__name__}: {err}") from err
    except Exception as err:
        raise PluginError(f"plugin {spec!r} failed to import: {type(err).__name__}: "
                          f"{' '.join(str(err).split())}") from err


def import_plugins(specs: Iterable[str] | str | None, source: str = "--import") -> list[ModuleType]:
    """`import_plugin` each of ``specs`` in order (a string is one); ``source`` names where they came from in the
    error (``"--import"``, ``"config file imports"``). Raises `PluginError`."""
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, (list, tuple)):
        raise PluginError(f"{source}={specs!r} is invalid: must be a list of module names or .py paths")
    modules = []
    for spec in specs:
        try:
            modules.append(import_plugin(spec))
        except PluginError as err:
            raise PluginError(f"{source}: {err}") from err.__cause__
    return modules


def load_entry_points() -> list[str]:
    """Load every entry point of :data:`ENTRY_POINT_GROUP` once per process (later calls do nothing): a module is
    imported, a callable the entry point names is called with no argument. Returns the names loaded by this call.

    Raises `PluginError` naming the entry point and its distribution when one fails to load."""
    global _ENTRY_POINTS_LOADED
    with _LOCK:
        if _ENTRY_POINTS_LOADED:
            return []
        _ENTRY_POINTS_LOADED = True  # first: a plugin that looks a name up while it loads does not recurse
        loaded = []
        for entry in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            dist = getattr(getattr(entry, "dist", None), "name", None) or "?"
            try:
                target = entry.load()
                if callable(target) and not isinstance(target, ModuleType):
                    target()
            except Exception as err:
                raise PluginError(f"entry point {entry.name!r} = {entry.value!r} of package {dist!r} (group "
                                  f"{ENTRY_POINT_GROUP!r}) failed to load: {type(err).__name__}: "
                                  f"{' '.join(str(err).split())}") from err
            loaded.append(entry.name)
            _LOADED.append(entry.name)
        return loaded


def loaded_entry_points() -> tuple[str, ...]:
    """The names of the entry points loaded in this process so far."""
    return tuple(_LOADED)
