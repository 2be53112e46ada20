"""Train a `TrainerConfig` into a folder: the library's entry point (``python -m rlvr_lib train``).

`train` writes one run into one folder ``out``:

* ``checkpoint.pt``: the `Trainer` checkpoint; a rerun of the same config resumes from it, one of another
  config is refused (`check_resumable`).
* ``model/``: the final weights and tokenizer (``save_pretrained``), usable as a policy path.
* ``<method>-<hash>-s<seed>.json``: the run's record (`record_dict`): its key (`run_key`), metric history,
  world size, dtype.

On several processes every process trains and rank 0 writes. With ``backend="trl"`` the run trains on TRL's
``GRPOTrainer`` (`rlvr_lib.backends.trl`, files under ``trl/``) and is not resumed.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from rlvr_lib import __version__
from rlvr_lib.backends import BACKENDS
from rlvr_lib.config import hash_jsonable
from rlvr_lib.distributed import World, init_world
from rlvr_lib.files import write_json_atomic
from rlvr_lib.policy import load_policy
from rlvr_lib.policy.load import policy_fingerprint
from rlvr_lib.tasks import task_version
from rlvr_lib.trainer import (CheckpointError, Trainer, TrainerConfig, nan_to_none, previous_checkpoint,
                              read_checkpoint)
from rlvr_lib.validation import invalid

__all__ = ["CHECKPOINT_FILE", "MODEL_DIR", "TRL_DIR", "Trained", "check_resumable", "check_run", "record_dict",
           "run_key", "train", "train_folder", "versioned_key"]

CHECKPOINT_FILE = "checkpoint.pt"
"""The resumable checkpoint in a run's folder (`Trainer.save_checkpoint`)."""
MODEL_DIR = "model"
"""The final weights and tokenizer in a run's folder (``save_pretrained``; a policy path)."""
TRL_DIR = "trl"
"""TRL's ``output_dir`` in a run's folder with ``backend="trl"`` (logs, checkpoints if asked)."""
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]*$")
"""A run folder's name (the record's ``experiment``): letters, digits and ``. _ + = @ -``, not starting with a
symbol (the study's `rlvr_lib.study.runs.NAME_RE`)."""


@dataclasses.dataclass
class Trained:
    """What `train_folder` (and `train`, on rank 0) returns.

    Attributes: ``history`` (one dict per step), ``extra`` (the record's), ``resumed`` (`Trainer.resumed` or
    ``None``), ``record`` (path of the record `train` wrote, or ``None``).
    """

    history: list[dict[str, Any]]
    extra: dict[str, Any]
    resumed: dict[str, Any] | None = None
    record: Path | None = None


def versioned_key(key: dict, task: str) -> dict:
    """``key`` with ``"task_version"`` (`rlvr_lib.tasks.task_version`) added when the task has one."""
    version = task_version(task)
    return key if version is None else {**key, "task_version": version}


def run_key(config: TrainerConfig, *, backend: str = "native", trl_args: Mapping | None = None) -> dict:
    """A run's key: ``{"train": config, "policy_sha": ...}`` with the task's version (`versioned_key`), and with
    ``backend="trl"`` ``"backend": "trl"`` and the resolved ``"trl_args"`` (`check_run`). Its hash names the record."""
    key = versioned_key({"train": config.to_dict(), "policy_sha": policy_fingerprint(config.policy)}, config.task)
    if backend == "trl":
        key = {**key, "backend": "trl", "trl_args": dict(trl_args or {})}
    return key


def check_resumable(config: TrainerConfig, out: str | Path) -> None:
    """Refuse a folder whose ``checkpoint.pt`` is of another config, or that has no sound checkpoint to resume
    from (``checkpoint.pt`` damaged and ``checkpoint.prev.pt`` missing or damaged too): ValueError, one line
    naming the fields or both files. A damaged ``checkpoint.pt`` with a sound previous copy is checked by that
    copy's config (the `Trainer` resumes from it)."""
    checkpoint = Path(out) / CHECKPOINT_FILE
    if not checkpoint.is_file():
        return
    try:
        saved = _saved_config(checkpoint)
    except Exception:  # noqa: BLE001 - unreadable: read_checkpoint says why (or finds it sound after all)
        sound = _sound_previous(checkpoint)
        if sound is None:
            return
        saved = _saved_config(sound)
    wanted = config.to_dict()
    if saved != wanted:
        changed = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
        raise ValueError(f"{str(out)!r} holds the checkpoint of a run with another config (differs in {changed}): "
                         f"pass another output folder, or delete {checkpoint} and {previous_checkpoint(checkpoint)} "
                         "to start over")


def _saved_config(checkpoint: Path) -> dict:
    """The config a checkpoint file holds, read without loading its tensors (memory-mapped)."""
    return torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)["config"]


def _sound_previous(checkpoint: Path) -> Path | None:
    """For a ``checkpoint`` that could not be read: its sound previous copy; ``None`` when `read_checkpoint`
    finds ``checkpoint`` sound after all. Raises CheckpointError (one line, naming both files) when there is
    none."""
    try:
        read_checkpoint(checkpoint, load=False)
        return None
    except CheckpointError as bad:
        damaged = _one_line(bad)
    prev = previous_checkpoint(checkpoint)
    if not prev.is_file():
        raise CheckpointError(f"{damaged}; there is no previous checkpoint {prev} to resume from: delete "
                              f"{checkpoint} to start over")
    try:
        read_checkpoint(prev, load=False)
        _saved_config(prev)
    except CheckpointError as worse:
        raise CheckpointError(f"both checkpoints are damaged: {damaged}; and {_one_line(worse)}; delete "
                              f"{checkpoint} and {prev} to start over") from None
    except Exception as worse:  # noqa: BLE001 - sound by its sha256, yet no config in it
        raise CheckpointError(f"both checkpoints are damaged: {damaged}; and checkpoint {prev} holds no readable "
                              f"config ({type(worse).__name__}); delete {checkpoint} and {prev} to start "
                              "over") from None
    return prev


def _one_line(err: BaseException) -> str:
    return re.sub(r"\s+", " ", str(err)).strip()


def check_run(config: TrainerConfig, out: str | Path, *, backend: str = "native",
              trl_args: Mapping | None = None) -> tuple[Path, dict]:
    """Check a run's arguments before anything loads; returns ``(out resolved, trl_args)``.

    ``config.engine == "vllm"`` adds ``use_vllm=True`` to ``trl_args``. Raises ValueError on an unknown ``backend``,
    ``trl_args`` with the native backend, a folder name not `SAFE_NAME`, or another config's checkpoint.
    """
    if backend not in BACKENDS:
        raise invalid("backend", backend, f"one of {list(BACKENDS)}")
    if trl_args and backend != "trl":
        raise invalid("trl_args", dict(trl_args), "empty unless backend='trl'")
    out = Path(out).resolve()
    if not SAFE_NAME.match(out.name):
        raise invalid("out folder name", out.name,
                      "file-name safe (letters, digits and . _ + = @ -, not starting with a symbol)")
    check_resumable(config, out)
    if backend != "trl":
        return out, {}
    return out, {**({"use_vllm": True} if config.engine == "vllm" else {}), **(trl_args or {})}


def train_folder(config: TrainerConfig, out: Path, world: World, *, dtype: torch.dtype | None = None,
                 progress: bool = True, backend: str = "native", trl_args: Mapping | None = None) -> Trained:
    """Train ``config`` into ``out`` on this process of ``world``: checkpoint and ``model/``, no record."""
    model, tokenizer = load_policy(config.policy, device=world.device, dtype=dtype)
    if backend == "trl":
        from rlvr_lib.backends.trl import MethodGRPOTrainer

        trainer = MethodGRPOTrainer(config, model, tokenizer, output_dir=str(out / TRL_DIR), trl_args=dict(trl_args))
        trainer.train()
        if trainer.core.world.is_main:
            model.save_pretrained(out / MODEL_DIR)
            tokenizer.save_pretrained(out / MODEL_DIR)
        return Trained(nan_to_none(trainer.history),
                       {"world_size": trainer.core.world.size, "dtype": str(model.dtype), "backend": "trl"})
    trainer = Trainer(config, model, tokenizer, checkpoint_dir=out)
    history = trainer.train(progress=progress)
    trainer.save_checkpoint(out / CHECKPOINT_FILE)
    whole, _ = world.full_state_dict(model)  # sharded: a collective, rank 0 gets the whole weights
    if config.lora is not None:  # LoRA (never sharded): the adapters merged into a plain copy of the model
        from rlvr_lib.lora import merged

        model = merged(trainer.model)
    if world.is_main:
        model.save_pretrained(out / MODEL_DIR, state_dict=whole if world.sharded else None)
        tokenizer.save_pretrained(out / MODEL_DIR)
    return Trained(nan_to_none(history), {"world_size": world.size, "dtype": str(model.dtype)}, trainer.resumed())


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record_dict(config: TrainerConfig, out: Path, key: dict, trained: Trained, *, started: str, finished: str,
                wall_time_s: float) -> dict:
    """The record `train` writes: the fields of `rlvr_lib.study.runs.RunRecord` that a run without the study has
    (no machine or commit), so the study reads it as one. ``final`` is empty: training evaluates nothing."""
    key_hash = hash_jsonable(key)
    extra = dict(trained.extra, **({"resumed": trained.resumed} if trained.resumed else {}))
    return {"experiment": out.name, "name": config.method, "run_id": f"{config.method}-{key_hash}-s{config.seed}",
            "config": key, "config_hash": key_hash, "config_type": "dict", "seed": config.seed,
            "status": "finished", "version": __version__, "started": started, "finished": finished,
            "wall_time_s": wall_time_s, "history": trained.history, "final": {}, "extra": extra}


def train(config: TrainerConfig, out: str | Path, *, dtype: torch.dtype | None = None, progress: bool = True,
          backend: str = "native", trl_args: Mapping | None = None, record: bool = True) -> Trained | None:
    """Train ``config`` on this process (and the others a launcher started) into folder ``out``.

    ``backend``: ``"native"`` (`Trainer`) or ``"trl"`` (`rlvr_lib.backends.trl.MethodGRPOTrainer`, with
    ``trl_args``); ``record``: write ``<method>-<hash>-s<seed>.json``. Returns `Trained` on rank 0, else ``None``.
    Raises ValueError (see `check_run`) or RuntimeError on a DeepSpeed launch.
    """
    out, trl_args = check_run(config, out, backend=backend, trl_args=trl_args)
    world = init_world()  # before anything is written: a launch no loop hosts is refused here
    key = run_key(config, backend=backend, trl_args=trl_args)
    started, t0 = _now(), time.perf_counter()
    trained = train_folder(config, out, world, dtype=dtype, progress=progress, backend=backend, trl_args=trl_args)
    if not world.is_main:
        return None
    if record:
        earlier = trained.resumed["earlier_s"] if trained.resumed else 0.0
        data = record_dict(config, out, key, trained, started=started, finished=_now(),
                           wall_time_s=time.perf_counter() - t0 + earlier)
        trained.record = out / f"{data['run_id']}.json"
        write_json_atomic(trained.record, data)
    return trained
