"""The study's manifest (`rlvr_lib.study.papers`): consistent with the notebooks, claims modules and registry it names,
read by every list that used to name the notebooks or the four methods, and blind to a method a user registers."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_lib.methods import METHODS, Method
from rlvr_lib.methods.compose import SEPARATOR
from rlvr_lib.methods.registry import register_method, shipped_methods
from rlvr_lib.study import papers

ROOT = Path(__file__).resolve().parent.parent


def test_every_notebook_names_its_file_folder_and_claims_module():
    assert len({nb.notebook for nb in papers.NOTEBOOKS}) == len({nb.experiment for nb in papers.NOTEBOOKS}) \
        == len(papers.NOTEBOOKS)
    for nb in papers.NOTEBOOKS:
        assert (ROOT / "notebooks" / f"{nb.notebook}.ipynb").is_file(), nb.notebook
        reg = importlib.import_module(f"rlvr_lib.study.claims.{nb.claims}").REGISTRY
        assert (reg.notebook, reg.experiment) == (nb.notebook, nb.experiment)
        assert nb.folder == f"{nb.experiment}_full" and papers.notebook_for(nb.folder) is nb
        assert papers.notebook_for(f"{nb.experiment}_quick") is nb and papers.notebook(nb.notebook) is nb
        for experiment, _, _ in nb.shared:  # a shared row comes from another notebook's folder
            assert papers.notebook_for(experiment) not in (None, nb), (nb.notebook, experiment)
    assert papers.notebook_for("testbed_dynamics") is None


def test_every_budget_holds_notebooks_and_every_notebook_one_budget():
    keys = [b.key for b in papers.BUDGETS]
    assert len(set(keys)) == len(keys)
    assert {nb.budget for nb in papers.NOTEBOOKS} == set(keys)


def test_each_notebooks_methods_are_shipped_and_hold_every_arm_its_claims_module_declares():
    shipped = set(shipped_methods())
    for nb in papers.NOTEBOOKS:
        assert set(nb.methods) <= shipped and len(set(nb.methods)) == len(nb.methods), nb.notebook
        module = importlib.import_module(f"rlvr_lib.study.claims.{nb.claims}")
        declared = {part for pair in getattr(module, "COMPARISONS", {}).values()
                    for arm in (pair.method, pair.comparator) for part in arm.name.split(SEPARATOR)}
        assert declared <= set(nb.methods), (nb.notebook, sorted(declared - set(nb.methods)))


def test_the_manifest_agrees_with_the_lists_notebooks_02_and_08_train():
    """Notebook 02 trains GRPO and every baseline the library registers; notebook 08 its gate's arms and the papers'
    variants (`rlvr_lib.study.regimes`), within its stated budget."""
    from rlvr_lib.methods.baselines import BASELINES
    from rlvr_lib.study import regimes

    assert papers.notebook("baselines").methods == ("grpo", *BASELINES)
    assert papers.notebook("discovery").methods == (*regimes.GATE_ARMS, *regimes.METHOD_ARMS)
    assert regimes.METHOD_ARMS == tuple(name for p in papers.PAPERS for name in p.methods)
    assert {b.key: b.hours for b in papers.BUDGETS}[papers.notebook("discovery").budget] == regimes.BUDGET_HOURS


def test_each_paper_names_its_notebook_variants_and_place_when_composed():
    from rlvr_lib.study.claims.tables import PAPER_NAMES

    assert tuple(p.name for p in papers.PAPERS) == PAPER_NAMES
    assert sorted(p.compose_rank for p in papers.PAPERS) == list(range(len(papers.PAPERS)))
    for p in papers.PAPERS:
        assert set(p.methods) <= set(papers.notebook(p.notebook).methods), p.key
        assert papers.paper(p.key) is p
    # The order pairs compose in and the pair table of docs/real-models.md (composite names are part of run keys).
    assert papers.composition_order() == ("nudgerl", "sage", "threepo", "vigor")
    assert papers.pair_table_names() == ("nudgerl", "sage", "b3po", "vigor")


def test_a_name_the_manifest_lacks_is_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match=r"notebook='09_x' is invalid: must be one of \['01_grpo"):
        papers.notebook("09_x")
    with pytest.raises(ValueError, match=r"paper='dapo' is invalid: must be one of \['nudgerl', 'threepo'"):
        papers.paper("dapo")


def test_the_study_lists_read_the_manifest():
    from rlvr_lib.study import comparisons, head_to_head, provenance, report
    from rlvr_lib.study.claims import REGISTRIES

    assert comparisons.CLAIMS_MODULES == papers.claims_modules()
    assert REGISTRIES == {nb.experiment: nb.claims for nb in papers.NOTEBOOKS}
    assert head_to_head.METHOD_ARMS == papers.composition_order()
    assert head_to_head.THREEPO_VARIANTS == papers.paper("threepo").methods
    assert [s[2] for s in report.SECTIONS] == [nb.notebook for nb in papers.NOTEBOOKS]
    assert sorted(nb for _, notebooks, _, _ in report.BUDGETS for nb in notebooks) \
        == sorted(nb.notebook for nb in papers.NOTEBOOKS)
    assert set(report.PREMISE_ROWS) == {p.key for p in papers.PAPERS}
    assert set(provenance.RUN_ENTRIES) == {nb.folder for nb in papers.NOTEBOOKS} | set(provenance.SUPPORTING)
    assert provenance.RUN_ENTRIES["head_to_head_full"] == (*papers.TABLE_ENTRIES, "rlvr_lib.study.head_to_head")


def test_the_shipped_list_is_what_the_library_registers_on_import():
    code = ("from rlvr_lib.methods import METHODS\nfrom rlvr_lib.methods.registry import shipped_methods\n"
            "print(sorted(METHODS) == sorted(shipped_methods()), len(shipped_methods()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == ["True", str(len(shipped_methods()))]


@pytest.fixture
def user_method():
    """A method registered by a user, as a new user would: a preset of GRPO."""
    register_method("users_grpo", Method, "a user's GRPO without KL", kl_coef=0.0)
    yield "users_grpo"
    METHODS.pop("users_grpo")


def test_a_method_a_user_registers_is_neither_tuned_nor_asked_to_run_on_trl(user_method):
    """The selections of `test_every_registered_method_is_tuned_or_takes_its_comparators_pick` (tests/test_lr_picks.py)
    and `test_every_preset_trains_three_steps_through_the_backend` (tests/test_trl_backend.py) leave it out, while
    the registry holds it."""
    from rlvr_lib.study.tuning import methods_to_tune
    from test_trl_backend import trl_presets

    assert user_method in METHODS
    assert user_method not in shipped_methods()
    assert user_method not in methods_to_tune() and user_method not in trl_presets()
    assert set(trl_presets()) == set(shipped_methods()) and "grpo" in methods_to_tune()


def test_a_composite_resolved_on_demand_is_not_shipped():
    from rlvr_lib.methods.compose import compose

    name = compose("sage", "grpo")
    assert name in METHODS and name not in shipped_methods()


def test_a_study_method_the_library_does_not_ship_is_refused(monkeypatch, user_method):
    from rlvr_lib.study.tuning import methods_to_tune

    nb = papers.NOTEBOOKS[0]
    monkeypatch.setattr(papers, "NOTEBOOKS", (type(nb)(**{**nb.__dict__, "methods": (*nb.methods, user_method)}),
                                              *papers.NOTEBOOKS[1:]))
    with pytest.raises(ValueError, match=r"papers.NOTEBOOKS methods=\['users_grpo'\] is invalid"):
        methods_to_tune()


def test_the_pair_table_takes_its_names_from_the_caller():
    """The library's pair table names no method of its own: the study passes the manifest's."""
    from rlvr_lib.methods.compose import pair_table

    table = pair_table(papers.pair_table_names())
    assert table.splitlines()[2].startswith("| nudgerl + sage | ") and len(table.splitlines()) == 2 + 6
    with pytest.raises(ValueError, match=r"names=\('nudgerl',\) is invalid: must be a sequence of at least two"):
        pair_table(("nudgerl",))
    with pytest.raises(ValueError, match=r"method='no_such' is not registered: must be one of"):
        pair_table(("nudgerl", "no_such"))
