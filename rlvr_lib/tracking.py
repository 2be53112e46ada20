"""Experiment trackers for the native loop (``TrainerConfig.report_to``), through `accelerate.tracking`.

Each name of `TRACKERS` is one of accelerate's tracker classes (TensorBoard, Weights & Biases, trackio, MLflow,
Comet, Aim, ClearML, DVCLive, SwanLab); the library each needs is the tracker's own (``tensorboard``, ``wandb``,
...), checked when the run starts. Trackers that write files (TensorBoard, Aim, MLflow) write under the run
folder's ``logs/``; the others follow their own settings (e.g. ``WANDB_MODE=offline``, ``WANDB_DIR``).
Only the main process logs.
"""

from __future__ import annotations

import math
from pathlib import Path

from accelerate.tracking import LOGGER_TYPE_TO_CLASS, GeneralTracker, get_available_trackers

__all__ = ["TRACKERS", "Tracking", "build_trackers", "check_report_to"]

TRACKERS: tuple[str, ...] = tuple(sorted(LOGGER_TYPE_TO_CLASS))
"""Tracker names ``report_to`` accepts (accelerate's)."""

_PACKAGE = {"comet_ml": "comet_ml", "tensorboard": "tensorboard"}


def check_report_to(report_to) -> None:
    """ValueError unless ``report_to`` is a list of distinct names of `TRACKERS`."""
    if isinstance(report_to, str) or not all(isinstance(n, str) for n in report_to):
        raise ValueError(f"TrainerConfig.report_to={report_to!r} is invalid: must be a list of tracker names, "
                         f"each one of {list(TRACKERS)}")
    for name in report_to:
        if name not in TRACKERS:
            raise ValueError(f"TrainerConfig.report_to: {name!r} is invalid: must be one of {list(TRACKERS)}")
    if len(set(report_to)) != len(report_to):
        raise ValueError(f"TrainerConfig.report_to={list(report_to)!r} is invalid: must name each tracker once")


def build_trackers(report_to, run_name: str, logging_dir: str | Path | None) -> list[GeneralTracker]:
    """Started accelerate trackers for the names ``report_to`` (`check_report_to`).

    Raises ValueError naming the tracker when its library is not installed, or when it writes files and there is
    no ``logging_dir`` (no run folder).
    """
    check_report_to(report_to)
    available = {str(t) for t in get_available_trackers()}
    trackers = []
    for name in report_to:
        cls = LOGGER_TYPE_TO_CLASS[name]
        if name not in available:
            raise ValueError(f"report_to {name!r}: the {_PACKAGE.get(name, name)} package is not installed "
                             f"(pip install {_PACKAGE.get(name, name)}), or leave {name!r} out of report_to")
        if cls.requires_logging_directory or name == "mlflow":
            if logging_dir is None:
                raise ValueError(f"report_to {name!r} writes files and this trainer has no run folder: give the "
                                 "Trainer a checkpoint_dir (or log_dir)")
            if name == "mlflow":
                tracker = cls(experiment_name=run_name, logging_dir=str(logging_dir))
            else:
                tracker = cls(run_name, str(logging_dir))
        else:
            tracker = cls(run_name)
        tracker.start()
        trackers.append(tracker)
    return trackers


class Tracking:
    """The run's trackers: ``log(metrics, step)`` sends every finite real-valued metric; ``finish()`` closes them."""

    def __init__(self, trackers: list[GeneralTracker]):
        self.trackers = trackers

    def store_config(self, config: dict) -> None:
        """Log the config's scalar fields as the run's hyperparameters (lists and dicts as their text)."""
        values = {k: (v if isinstance(v, (bool, int, float, str)) or v is None else str(v)) for k, v in config.items()}
        values = {k: ("None" if v is None else v) for k, v in values.items()}
        for tracker in self.trackers:
            tracker.store_init_configuration(values)

    def log(self, metrics: dict, step: int) -> None:
        values = {k: float(v) for k, v in metrics.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        for tracker in self.trackers:
            tracker.log(values, step=step)

    def finish(self) -> None:
        for tracker in self.trackers:
            tracker.finish()
        self.trackers = []
