"""Train a method and evaluate it, as one cached, resumable run.

A notebook calls `evaluate_base` once and `train_and_evaluate` per (method,
seed); both go through `rlvr_lib.study.runs.cached_run`, so a finished run is
read back from ``results/<experiment>/`` instead of recomputed, and an
interrupted training resumes from its last checkpoint (kept under
``results/.checkpoints/``, deleted once the run record is written).

`train_run` is the library's `rlvr_lib.run.train` (``python -m rlvr_lib train``) with
the study's run record: one config, on one process or several, with its checkpoint,
final weights and record in one folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping

import torch

from rlvr_lib.study.claims import record_extra
from rlvr_lib.eval.policy_eval import EvalSpec, evaluate_policy
from rlvr_lib.config import hash_jsonable
from rlvr_lib.distributed import init_world
from rlvr_lib.study.probes.ivon_regime import ivon_regime_of
from rlvr_lib.study.runs import RESUMED, RunRecord, cached_run, results_root
from rlvr_lib.study.testbed import key_train
from rlvr_lib.methods.registry import resolved_method_options
from rlvr_lib.policy import load_policy
from rlvr_lib.policy.load import policy_fingerprint
from rlvr_lib.rollout import KVCacheEngine
from rlvr_lib.run import check_run, run_key as train_key, train_folder, versioned_key
from rlvr_lib.trainer import Trainer, TrainerConfig, nan_to_none
from rlvr_lib.validation import invalid

EXTRA_EVALS = "extra_evals"
"""Key of the extra evaluations' specs in a run's cache key (``record.config``)."""
EVALS = "evals"
"""Key of the extra evaluations' results in ``record.extra``."""
METHOD_OPTIONS = "method_options"
IVON_REGIME = "ivon_regime"
"""``record.extra`` key of an IVON run's regime check (`rlvr_lib.study.probes.ivon_regime.ivon_regime_of`: flagged
when IVON clipped over 20% of the weights on over 5% of the post-warm-up steps)."""
"""``record.extra`` key: the method's options with defaults filled in (`resolved_method_options`)."""


def evaluate_base(experiment: str, spec: EvalSpec, policy: str | None = None, *, root=None,
                  name: str = "base") -> RunRecord:
    """Evaluate the untrained policy (cached as run ``name``, one record per ``spec.seed``).

    The cache key holds the policy's content hash (`policy_fingerprint`), as
    does `train_and_evaluate`'s: a retrained checkpoint never hits an old record.
    """

    def run():
        model, tokenizer = load_policy(policy)
        return [], evaluate_policy(KVCacheEngine(model, tokenizer), spec)

    key = versioned_key({"policy": policy, "policy_sha": policy_fingerprint(policy), "eval": spec.to_dict()},
                        spec.task)
    return cached_run(experiment, name, key, spec.seed, run, root=root, extra=record_extra(experiment),
                      one_processor=True)


def _check_extra_specs(extra_specs: Mapping[str, EvalSpec] | None) -> dict[str, EvalSpec]:
    """``extra_specs`` as a plain dict, checked: labels are non-empty strings, values `EvalSpec`s."""
    if extra_specs is None:
        return {}
    if not isinstance(extra_specs, Mapping):
        raise invalid("extra_specs", type(extra_specs).__name__, "None or a {label: EvalSpec} mapping")
    for label, spec in extra_specs.items():
        if not isinstance(label, str) or not label:
            raise invalid("extra_specs label", label, "a non-empty string")
        if not isinstance(spec, EvalSpec):
            raise invalid(f"extra_specs[{label!r}]", type(spec).__name__, "an EvalSpec")
    return dict(extra_specs)


def run_key(config: TrainerConfig, spec: EvalSpec, extra_specs: Mapping[str, EvalSpec] | None = None) -> dict:
    """The cache key of a `train_and_evaluate` run: training config, policy hash, evaluation(s).

    ``{"train": config, "policy_sha": ..., "eval": spec}`` with the task's version (`versioned_key`), plus
    ``"extra_evals": {label: spec}`` only when ``extra_specs`` is non-empty, so
    a run without extra evaluations keeps the key (and run id) it always had.
    """
    extra_specs = _check_extra_specs(extra_specs)
    key = versioned_key({"train": key_train(config), "policy_sha": policy_fingerprint(config.policy),
                         "eval": spec.to_dict()}, config.task)
    if extra_specs:
        key[EXTRA_EVALS] = {label: s.to_dict() for label, s in extra_specs.items()}
    return key


def train_and_evaluate(
    experiment: str,
    name: str,
    config: TrainerConfig,
    spec: EvalSpec,
    *,
    root=None,
    checkpoint_every: int = 10,
    progress: bool = False,
    extra_specs: Mapping[str, EvalSpec] | None = None,
) -> RunRecord:
    """Train ``config`` (its seed is the run's seed) and evaluate the result on ``spec``.

    The evaluation on ``spec`` is ``record.final``. Each extra spec is
    evaluated on the same trained policy and stored as
    ``record.extra["evals"][label]`` (the format of ``final``), its spec as
    ``record.config["extra_evals"][label]``; read them as records with
    `rlvr_lib.study.summaries.extra_evaluation`. The extra specs are part of
    the cache key only when there are any (`run_key`): without them a run hits
    the records cached before this option existed.

    Args:
        experiment: Results folder name.
        name: Run name (method label), e.g. ``"grpo-g8"``.
        config: The trainer config.
        spec: The evaluation after training.
        root: Results root (default ``results/``).
        checkpoint_every: Steps between resumable checkpoints.
        progress: Show a progress bar.
        extra_specs: ``{label: EvalSpec}`` evaluated after training besides
            ``spec`` (e.g. ``{"wide": EvalSpec(samples=256, ...)}``, `rlvr_lib.study.profiles`), or None.

    Raises:
        ValueError: on ``extra_specs`` that is not a mapping of non-empty
            string labels to `EvalSpec`s.
    """
    extra_specs = _check_extra_specs(extra_specs)
    key = run_key(config, spec, extra_specs)
    ckpt = results_root(root) / ".checkpoints" / experiment / f"{name}-{hash_jsonable(key)}-s{config.seed}"

    options = resolved_method_options(config)

    def run():
        trainer = Trainer(config.replace(checkpoint_every=checkpoint_every), checkpoint_dir=ckpt)
        history = trainer.train(progress=progress)
        engine = KVCacheEngine(trainer.model, trainer.tokenizer)
        final = evaluate_policy(engine, spec)
        extra = {METHOD_OPTIONS: options, RESUMED: trainer.resumed()}
        regime = ivon_regime_of(history, config.to_dict(), name=name)  # None unless the run trained with IVON
        if regime is not None:
            extra[IVON_REGIME] = regime
        if extra_specs:
            extra[EVALS] = {label: evaluate_policy(engine, s) for label, s in extra_specs.items()}
        return nan_to_none(history), final, extra

    record = cached_run(experiment, name, key, config.seed, run, root=root, extra=record_extra(experiment),
                        one_processor=True)
    if isinstance(record, RunRecord):  # not a plan's stand-in (rlvr_lib.study.plan): a run another process
        shutil.rmtree(ckpt, ignore_errors=True)  # is computing keeps its checkpoint while a plan is listed
    _check_method_options(record, options)
    return record


def _check_method_options(record: RunRecord, options: dict) -> None:
    """Refuses a cached record whose stored method options differ from ``options`` (records made before
    the options were stored carry none and pass)."""
    stored = (record.extra or {}).get(METHOD_OPTIONS)
    if stored is None or stored == options:
        return
    changed = {k: (stored.get(k), options.get(k)) for k in sorted(set(stored) | set(options))
               if stored.get(k) != options.get(k)}
    raise ValueError(f"cached run {record.experiment}/{record.run_id} was trained with other method options "
                     f"(option: (stored, now)) {changed}: an option's default changed since, and defaults are not "
                     f"part of the run key; delete that record (and its checkpoint) to recompute it")


def train_run(config: TrainerConfig, out, *, dtype: torch.dtype | None = None, progress: bool = True,
              backend: str = "native", trl_args: Mapping | None = None) -> RunRecord | None:
    """`rlvr_lib.run.train` with the study's record: ``<method>-<hash>-s<seed>.json`` written by `cached_run`
    (experiment = the folder's name, rewritten on every run; the record's machine and commit), beside
    ``checkpoint.pt`` and ``model/`` as `rlvr_lib.run` writes them.

    The key is `rlvr_lib.run.run_key`'s (``backend`` and ``trl_args`` with the TRL backend); ``extra`` holds the
    world size and dtype (and ``backend``). Arguments and errors are `rlvr_lib.run.train`'s.

    Returns:
        The record on rank 0, ``None`` on the other processes.
    """
    out, trl_args = check_run(config, out, backend=backend, trl_args=trl_args)
    world = init_world()  # checked on every process, before any of them writes
    key = train_key(config, backend=backend, trl_args=trl_args)

    def run():
        trained = train_folder(config, out, world, dtype=dtype, progress=progress, backend=backend,
                               trl_args=trl_args)
        return trained.history, {}, trained.extra

    if not world.is_main:
        run()
        return None
    return cached_run(out.name, config.method, key, config.seed, run, root=out.parent, force=True)
