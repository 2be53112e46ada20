"""`TrainerConfig`s from YAML/JSON files and ``key=value`` overrides (``python -m rlvr_lib train``, ``configs/``).

A settings file is a mapping of `TrainerConfig` fields, optionally with ``method`` (whose preset applies first),
``imports`` (plugin modules, `rlvr_lib.plugins`) and ``dataset`` (a user's data as the task, `use_dataset`)::

    imports: [my_pkg.methods]
    method: sage
    policy: Qwen/Qwen2.5-Math-7B
    lr: 5e-6
    method_options: {tau: 1.2}

`build_config` layers the preset, then each mapping in order (file, ``--set``, flags), and validates; a bad
key or value raises ``ValueError`` naming it and its source. Integer fields have upper bounds too
(`CONFIG_INT_BOUNDS`: ``steps=99999999999999999999999`` is refused, not trained). YAML floats follow YAML 1.2
(``1e-6`` is a number).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rlvr_lib.methods import build_method, method_config
from rlvr_lib.trainer_config import INT_BOUNDS, TrainerConfig
from rlvr_lib.validation import check, invalid, is_int

__all__ = ["CONFIG_INT_BOUNDS", "EXTRA_KEYS", "build_config", "config_from_file", "load_settings",
           "parse_assignments", "parse_value", "use_dataset"]

CONFIG_INT_BOUNDS = INT_BOUNDS
"""The allowed range of every integer `TrainerConfig` field (`rlvr_lib.trainer_config.INT_BOUNDS`), checked here
first so the error names the value's source (a file, ``--set`` or a flag)."""

SETTINGS_SUFFIXES = (".yaml", ".yml", ".json")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that also reads exponent floats without a dot (``1e-6``) as floats."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_settings(path: str | Path) -> dict[str, Any]:
    """The mapping in a ``.yaml``/``.yml``/``.json`` settings file (``{}`` if empty).

    Raises ValueError on another suffix, unparsable text or a non-mapping; FileNotFoundError.
    """
    path = Path(path)
    check(path.suffix in SETTINGS_SUFFIXES, "config file", str(path), f"a file ending in one of {SETTINGS_SUFFIXES}")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_Loader)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"config file {path} could not be parsed: {err}") from None
    data = {} if data is None else data
    check(isinstance(data, Mapping), "config file", str(path), "a mapping of TrainerConfig fields at the top level")
    return dict(data)


def parse_value(text: str) -> Any:
    """A ``--set`` value: JSON when it parses (numbers, ``true``, ``null``, objects, lists), YAML for
    ``{...}``/``[...]`` flow collections without quotes, else the string itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if text.strip()[:1] in ("{", "["):
        try:
            return yaml.load(text, Loader=_Loader)
        except yaml.YAMLError as err:
            raise ValueError(f"--set value {text!r} could not be parsed: {err}") from None
    return text


def parse_assignments(items: Sequence[str]) -> dict[str, Any]:
    """``["lr=1e-6", "method_options={tau: 1.2}"]`` -> ``{"lr": 1e-06, "method_options": {"tau": 1.2}}`` (ValueError without ``=``)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        check(sep == "=" and key.strip() != "", "--set", item, "KEY=VALUE with KEY a TrainerConfig field")
        out[key.strip()] = parse_value(value)
    return out


def _check_keys(settings: Mapping[str, Any], source: str) -> None:
    fields = sorted(TrainerConfig.__dataclass_fields__)
    for key in settings:
        if key not in TrainerConfig.__dataclass_fields__:
            raise invalid(f"{source} key", key, f"a TrainerConfig field, one of {fields}, or one of {list(EXTRA_KEYS)}")


EXTRA_KEYS = ("imports", "dataset")
"""Keys of a settings layer that are not `TrainerConfig` fields: ``imports`` (plugin modules imported before any
name is resolved, `rlvr_lib.plugins.import_plugins`) and ``dataset`` (a `use_dataset` block that sets ``task``)."""


def use_dataset(block: Any, source: str = "dataset") -> str:
    """Register the `rlvr_lib.tasks.math_task.dataset_task` a ``dataset:`` block describes (``source`` required;
    ``prompt_column``, ``answer_column``, ``split``, ``hub_config``, ``solution_column``) and return its task name.
    The same block gives the same name, registered once per process. Raises ValueError naming a bad key or value
    (a column that is not in the file lists its columns)."""
    from rlvr_lib.tasks import TASKS, register_task
    from rlvr_lib.tasks.math_task import DATASET_KEYS, dataset_task

    check(isinstance(block, Mapping) and "source" in block, f"{source} dataset", block,
          f"a mapping with `source` (a Hub data set name or a local file) and optionally {list(DATASET_KEYS[1:])}")
    for key in block:
        if key not in DATASET_KEYS:
            raise invalid(f"{source} dataset key", key, f"one of {list(DATASET_KEYS)}")
    task = dataset_task(**{k: v for k, v in block.items()})
    if task.name not in TASKS:
        register_task(task.name, task)
    return task.name


def _extra_keys(settings: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``settings`` without `EXTRA_KEYS`, once its ``imports`` are imported and its ``dataset`` registered (whose
    task name becomes ``task``; a layer giving both is refused)."""
    from rlvr_lib.plugins import import_plugins

    settings = dict(settings)
    import_plugins(settings.pop("imports", None), f"{source} imports")
    if "dataset" in settings:
        block = settings.pop("dataset")
        if "task" in settings:
            raise ValueError(f"{source}: both `task` ({settings['task']!r}) and `dataset` are given: a dataset is "
                             "the task; give one of them")
        settings["task"] = use_dataset(block, source)
    return settings


def _check_int_bounds(settings: Mapping[str, Any], source: str) -> None:
    """ValueError ``"<field>=<value> is invalid: must be an integer in [lo, hi] (given by <source>)"`` for an
    integer out of `CONFIG_INT_BOUNDS` (other types are left to `TrainerConfig`'s own checks)."""
    for key, (lo, hi) in CONFIG_INT_BOUNDS.items():
        value = settings.get(key)
        if is_int(value) and not lo <= value <= hi:
            raise invalid(key, value, f"an integer in [{lo}, {hi}] (given by {source})")


def build_config(method: str | None, *layers: tuple[str, Mapping[str, Any]]) -> TrainerConfig:
    """A validated `TrainerConfig`: ``method``'s preset (``None``: the last a layer sets), then each ``(source, settings)`` layer.

    A layer's ``imports`` are imported and its ``dataset`` registered first (`EXTRA_KEYS`), in layer order, before
    any name is resolved. Raises ValueError naming the key and its source on an unknown field, a missing or unknown
    method, or a bad value (an integer out of `CONFIG_INT_BOUNDS` included); `rlvr_lib.plugins.PluginError` (a
    ValueError) on a plugin that cannot be imported.
    """
    overrides: dict[str, Any] = {}
    for source, settings in layers:
        settings = _extra_keys(settings, source)
        _check_keys(settings, source)
        _check_int_bounds(settings, source)
        overrides.update(settings)
    name = method if method is not None else overrides.get("method")
    overrides.pop("method", None)
    if name is None:
        raise ValueError("no method: pass --method NAME or set `method:` in the config file")
    config = method_config(name, **overrides)
    build_method(config)  # validates method_options and the method's constraints on the other fields
    return config


def config_from_file(path: str | Path, method: str | None = None, **overrides: Any) -> TrainerConfig:
    """`build_config` of a settings file, then ``overrides``; ``method`` (if given) replaces the file's."""
    return build_config(method, (str(path), load_settings(path)), ("overrides", overrides))
