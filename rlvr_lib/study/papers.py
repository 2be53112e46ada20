"""The study's manifest: each notebook's folder, claims module, methods, shared rows and budget; each paper's method.

Everything in the study that lists the notebooks or the papers' methods reads it: the README's sections and budget
lines and the premises table (`rlvr_lib.study.report`), the experiments the stale-record check follows
(`rlvr_lib.study.provenance`), the claims registries (`rlvr_lib.study.claims`, `rlvr_lib.study.comparisons`), the
head to head's methods (`rlvr_lib.study.head_to_head`), the README's pair table (`rlvr_lib.methods.compose.pair_table`
of :func:`pair_table_names`) and the methods the lr sweep must cover (`rlvr_lib.study.tuning.methods_to_tune`).
The claims modules keep their own row and arm declarations (``REGISTRY``, ``COMPARISONS``); a notebook here names
its claims module, it does not copy them.

Adding a method to the study: its :class:`Paper` entry, the notebook's :class:`Notebook` entry (with its claims
module) and the notebook. This module is data only and imports nothing of the package, so every module above may
read it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BUDGETS", "Budget", "NOTEBOOKS", "Notebook", "PAPERS", "Paper", "SUPPORTING", "Supporting",
           "TABLE_ENTRIES", "claims_modules", "composition_order", "notebook", "notebook_for", "pair_table_names",
           "paper", "study_methods"]

TABLE_ENTRIES = ("rlvr_lib.study.pipeline", "rlvr_lib.study.arms")
"""The modules every notebook's runs are made by (`evaluate_base` / `train_and_evaluate`, directly or through Arms)."""


@dataclass(frozen=True)
class Budget:
    """A stated budget of `make reproduce` (README, "Budget"): ``hours`` elapsed on two workers, over the runs of its
    notebooks (the :class:`Notebook` entries naming ``key``) measured on ``policy`` (``"shipped"`` or a named policy:
    `rlvr_lib.study.report.compute_by_policy`'s keys)."""

    key: str
    label: str
    hours: float
    policy: str = "shipped"


@dataclass(frozen=True)
class Notebook:
    """One notebook of ``notebooks/``.

    Attributes:
        notebook: The file's stem (``notebooks/<notebook>.ipynb``; the executed full copy under
            ``results/notebooks/full/``).
        experiment: Its experiment prefix: its runs live in ``results/<experiment>_full/`` (``_quick`` for the quick
            profile) and its claims registry owns that folder.
        claims: Its claims module (``rlvr_lib.study.claims.<claims>``: ``REGISTRY`` and ``COMPARISONS``).
        title: The README section's title.
        budget: The key of the :data:`BUDGETS` entry its runs count against.
        methods: The registered methods whose runs its tables read (trained here or read from the notebook that
            trains them), composites left out (they take their components' tuned lr); the lr sweep covers each.
        shared: ``(experiment, run name, row label)`` of each row its README table reads from another notebook's
            folder (``experiment`` with its ``_full`` suffix).
        run_modules: Modules beyond :data:`TABLE_ENTRIES` that set its runs' configs (the stale-record check
            follows their imports too).
    """

    notebook: str
    experiment: str
    claims: str
    title: str
    budget: str
    methods: tuple[str, ...]
    shared: tuple[tuple[str, str, str], ...] = ()
    run_modules: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        """The full profile's experiment folder under ``results/``."""
        return f"{self.experiment}_full"

    @property
    def entries(self) -> tuple[str, ...]:
        """The modules whose functions make its run records (`rlvr_lib.study.provenance.RUN_ENTRIES`)."""
        return (*TABLE_ENTRIES, *self.run_modules)


@dataclass(frozen=True)
class Paper:
    """A paper's method in the study.

    Attributes:
        key: Its key in the head to head (`rlvr_lib.study.head_to_head`) and in notebook 00's premises
            (``results/testbed/premises.json``).
        name: The paper's name (`rlvr_lib.study.claims.tables.PAPER_NAMES`).
        notebook: The notebook that reproduces it.
        variants: ``(registered method, display name)`` of each variant the notebook's headline rows run, the one
            the README's pair table shows first.
        compose_rank: Its place when methods compose (`rlvr_lib.study.head_to_head`: pairs in this order).
    """

    key: str
    name: str
    notebook: str
    variants: tuple[tuple[str, str], ...]
    compose_rank: int

    @property
    def methods(self) -> tuple[str, ...]:
        """The registered names of its variants."""
        return tuple(name for name, _ in self.variants)


BUDGETS = (
    Budget("recompute", "notebooks 01-06 (the recompute, issue 31)", 12.0),
    Budget("head_to_head", "notebook 07 on the shipped policy (the head to head, issue 32)", 2.5),
    # 8 arms x 5 seeds at the full profile's 200 steps and 4 base evaluations, about 40 x 150-300 s.
    Budget("discovery", "notebook 08 (the discovery regime on its own policy, issue 55)", 2.0, "discovery"),
)

_BASE = ("baselines_full", "base", "base")

NOTEBOOKS = (
    Notebook("01_grpo_pass_at_k_modes_group_size", "grpo_baseline", "nb01_grpo", "GRPO baseline", "recompute",
             ("grpo",)),
    # Notebook 02 computes the base policy's evaluations and GRPO for every later notebook; its methods
    # are GRPO and every baseline `rlvr_lib.methods.baselines` registers (BASELINES, in order).
    Notebook("02_baselines_sage_t1_anchors", "baselines", "nb02_baselines", "Baselines", "recompute",
             ("grpo", "grpo_no_kl", "grpo_forward_kl", "grpo_k1", "grpo_k2", "dapo", "dr_grpo", "bnpo_loss",
              "bnpo_beta", "entropy_reg", "polaris", "polaris_fixed", "kl_cov", "clip_cov", "pope", "intuitor")),
    # Notebook 03 trains its own GRPO@G (at NudgeRL's settings) and reads 02's base and POPE runs.
    Notebook("03_nudgerl", "nudgerl", "nb03_nudgerl", "NudgeRL", "recompute", ("nudgerl", "grpo", "pope"),
             (_BASE, ("baselines_full", "pope", "pope"))),
    # Notebook 04 trains its own GRPO (at 3PO's settings) and reads 02's base, KL-anchored GRPO, GRPO without KL
    # and the three baselines 3PO's T1 compares with.
    Notebook("04_3po", "threepo", "nb04_3po", "3PO", "recompute",
             ("b3po", "m3po", "c3po", "grpo", "grpo_no_kl", "entropy_reg", "polaris", "kl_cov"),
             (_BASE, ("baselines_full", "grpo", "grpo (KL 0.2, notebook 02)"),
              *(("baselines_full", name, name) for name in ("grpo_no_kl", "entropy_reg", "polaris", "kl_cov")))),
    # Notebook 05 trains its own GRPO (grpo_k3) and reads 02's base and the four baselines its variants face.
    Notebook("05_sage", "sage", "nb05_sage", "SAGE", "recompute",
             ("sage", "sage_random", "sage_token", "grpo_k3", "bnpo_loss_branch", "dapo_branch", "grpo_no_kl",
              "grpo_forward_kl", "dapo", "bnpo_loss"),
             (_BASE, *(("baselines_full", name, name) for name in ("grpo_no_kl", "grpo_forward_kl", "dapo",
                                                                   "bnpo_loss")))),
    # Notebook 06 reads 02's base and INTUITOR runs.
    Notebook("06_vigor", "vigor", "nb06_vigor", "VIGOR", "recompute", ("vigor", "intuitor", "grpo"),
             (_BASE, ("baselines_full", "intuitor", "intuitor"))),
    # Notebook 07 (head to head at equal compute) reads 02's base and GRPO and 05's SAGE; its selected baselines
    # are read from 02 when 02 gave them the wide evaluation (`rlvr_lib.study.head_to_head.home`); its arms'
    # configs are set by its equal-compute budget and pair rules.
    Notebook("07_head_to_head", "head_to_head", "nb07_head_to_head", "Head to head", "head_to_head",
             ("nudgerl", "sage", "b3po", "m3po", "c3po", "vigor", "grpo", "grpo_k3", "grpo_no_kl"),
             (_BASE, ("baselines_full", "grpo", "grpo (notebook 02)"), ("sage_full", "sage", "sage (notebook 05)")),
             ("rlvr_lib.study.head_to_head",)),
    # Notebook 08 (the discovery regime): its own task, policy, base, GRPO, oracle and methods, whose
    # configs the regimes module sets.
    Notebook("08_discovery", "discovery", "nb08_discovery", "Discovery regime", "discovery",
             ("grpo", "oracle_explore", "nudgerl", "b3po", "m3po", "c3po", "sage", "vigor"), (),
             ("rlvr_lib.study.regimes",)),
)
"""The notebooks with a claims table, in README order."""

PAPERS = (
    Paper("nudgerl", "NudgeRL", "03_nudgerl", (("nudgerl", "NudgeRL"),), 0),
    Paper("threepo", "3PO", "04_3po", (("b3po", "B3PO"), ("m3po", "M3PO"), ("c3po", "C3PO")), 2),
    Paper("sage", "SAGE", "05_sage", (("sage", "SAGE"),), 1),
    Paper("vigor", "VIGOR", "06_vigor", (("vigor", "VIGOR"),), 3),
)
"""The papers' methods, in notebook order."""


@dataclass(frozen=True)
class Supporting:
    """An experiment that feeds the study indirectly: checked by `rlvr_lib.study.provenance`, never failing it."""

    experiment: str
    label: str
    entries: tuple[str, ...]


SUPPORTING = (
    Supporting("lr_tuning", "lr_tuning (TUNED_LR's sweep)", ("rlvr_lib.study.tuning",)),
    Supporting("testbed_dynamics", "00_testbed_calibration (dynamics.json, the step count)",
               ("rlvr_lib.study.dynamics",)),
)
"""The lr sweep behind the tuned lrs and notebook 00's dynamics calibration behind the step count."""


def notebook(name: str) -> Notebook:
    """The :class:`Notebook` whose ``notebook`` (file stem) or ``experiment`` prefix is ``name``.

    Raises:
        ValueError: naming the value and the notebooks of the manifest.
    """
    found = [nb for nb in NOTEBOOKS if name in (nb.notebook, nb.experiment)]
    if len(found) != 1:
        raise ValueError(f"notebook={name!r} is invalid: must be one of {[nb.notebook for nb in NOTEBOOKS]} or "
                         f"their experiments {[nb.experiment for nb in NOTEBOOKS]}")
    return found[0]


def notebook_for(experiment: str) -> Notebook | None:
    """The notebook that owns the folder ``experiment`` (``"sage_full"``, ``"sage_quick"`` or ``"sage"``), or None."""
    for suffix in ("_full", "_quick"):
        if experiment.endswith(suffix):
            experiment = experiment[: -len(suffix)]
            break
    return next((nb for nb in NOTEBOOKS if nb.experiment == experiment), None)


def paper(key: str) -> Paper:
    """The :class:`Paper` with ``key`` (``"nudgerl"``, ``"threepo"``, ...).

    Raises:
        ValueError: naming the value and the keys of the manifest.
    """
    found = [p for p in PAPERS if p.key == key]
    if len(found) != 1:
        raise ValueError(f"paper={key!r} is invalid: must be one of {[p.key for p in PAPERS]}")
    return found[0]


def claims_modules() -> tuple[str, ...]:
    """Every notebook's claims module, in notebook order."""
    return tuple(nb.claims for nb in NOTEBOOKS)


def composition_order() -> tuple[str, ...]:
    """The papers' keys in the order their methods compose (:attr:`Paper.compose_rank`)."""
    return tuple(p.key for p in sorted(PAPERS, key=lambda p: p.compose_rank))


def pair_table_names() -> tuple[str, ...]:
    """The methods README's pair table shows: each paper's first variant, in composition order."""
    return tuple(paper(key).methods[0] for key in composition_order())


def study_methods() -> tuple[str, ...]:
    """Every registered method a notebook's tables read, in notebook order, each once."""
    return tuple(dict.fromkeys(name for nb in NOTEBOOKS for name in nb.methods))
