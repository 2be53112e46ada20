"""The library's presets are the papers' settings; the testbed's calibrations live in `rlvr_lib.study.testbed`, and the
committed records keep their keys under the move."""

import json
import re
from pathlib import Path

import pytest
import yaml

from rlvr_lib.methods import METHODS, method_config
from rlvr_lib.methods.registry import resolved_method_options
from rlvr_lib.study import testbed
from rlvr_lib.study.runs import results_root
from rlvr_lib.study.testbed import calibrated_config, calibration, config_from_key, key_train, train_from_key
from rlvr_lib.trainer_config import TrainerConfig

PAPERS = Path(__file__).resolve().parents[2] / "shared" / "PAPERS.md"


def _section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n-----", start + len(title))
    return text[start:end if end > 0 else None]


def _number(section: str, pattern: str) -> float:
    match = re.search(pattern, section)
    assert match, f"PAPERS.md no longer states {pattern!r}"
    return float(match.group(1))


@pytest.fixture(scope="module")
def papers():
    if not PAPERS.is_file():
        pytest.skip(f"{PAPERS} is not beside the clone")
    return PAPERS.read_text()


def test_presets_are_the_settings_the_papers_state(papers):
    nudge = _section(papers, "## 1. NudgeRL")
    lr = _number(nudge, r"lr ([0-9.e-]+) cosine")
    for name in ("nudgerl", "pope"):  # POPE runs at NudgeRL's settings
        cfg = method_config(name)
        assert (cfg.lr, cfg.lr_schedule, cfg.kl_coef) == (lr, "cosine", 0.0), name
        assert (cfg.eps_low, cfg.eps_high) == (_number(nudge, r"eps ([0-9.]+),"),) * 2
        assert cfg.top_p == _number(nudge, r"top_p ([0-9.]+)") and cfg.temperature == 1.0

    threepo = _section(papers, "## 2. 3PO")
    for name in ("b3po", "m3po", "c3po"):
        o = METHODS[name].cls.Options()
        assert o.lr == _number(threepo, r"IVON lr ([0-9.]+) with rescale") and o.rescale_lr
        assert o.ess == _number(threepo, r"ESS ([0-9.e]+),")
        assert o.hess_init == _number(threepo, r"hess_init ([0-9.e-]+)")
        assert o.clip_radius == _number(threepo, r"clip_radius ([0-9.e-]+)")
        assert o.weight_decay == _number(threepo, r"wd ([0-9.e-]+)")
        assert method_config(name).kl_coef == 0.0  # "no KL"
    assert method_config("grpo").lr == _number(threepo, r"AdamW lr ([0-9.e-]+)")

    sage = _section(papers, "## 3. SAGE")
    beta, sage_lr = _number(sage, r"beta = ([0-9.]+)\."), _number(sage, r"lr ([0-9.e-]+),")
    for name in ("sage", "sage_token", "sage_random", "grpo_k3", "dapo_branch", "bnpo_loss_branch", "grpo_forward_kl"):
        cfg = method_config(name)
        assert (cfg.kl_coef, cfg.lr) == (beta, sage_lr), name
    branch = METHODS["sage"].cls.Options()
    assert branch.tau == _number(sage, r"tau = ([0-9.]+) nats") and branch.gamma == _number(sage, r"gamma = ([0-9.]+)")
    assert (branch.q_min, branch.q_max) == (0.6, 1.4)

    vigor = _section(papers, "## 4. VIGOR")
    for name in ("vigor", "intuitor"):  # INTUITOR runs at VIGOR's settings
        cfg = method_config(name)
        assert cfg.lr == _number(vigor, r"lr ([0-9.e-]+),") and cfg.kl_coef == _number(vigor, r"KL beta ([0-9.]+)")
        assert cfg.group_size == _number(vigor, r"G = ([0-9]+),")


def test_the_testbed_calibrates_each_setting_the_papers_fix_and_only_those():
    assert testbed.TESTBED_KL_COEF == 0.2 and testbed.TESTBED_TAU == 0.24
    for name in testbed.ANCHORED:
        cfg = calibrated_config(name, tuned_lr=False)
        assert (cfg.kl_coef, cfg.lr) == (testbed.TESTBED_KL_COEF, testbed.TESTBED_LR), name
        assert method_config(name).kl_coef in (0.04, 0.05)  # the papers' (DeepSeekMath's, SAGE's)
    for name in testbed.TAU_METHODS:
        assert calibrated_config(name).method_options["tau"] == testbed.TESTBED_TAU
    for name in testbed.IVON_METHODS:
        o = METHODS[name].cls(calibrated_config(name)).options
        assert (o.ess, o.clip_radius, o.lr) == (testbed.TESTBED_ESS, testbed.TESTBED_CLIP_RADIUS, testbed.TESTBED_IVON_LR)
    # a method the testbed leaves alone is its paper's preset at its tuned lr
    assert calibration("dr_grpo") == {} and calibrated_config("dr_grpo") == method_config(
        "dr_grpo", lr=testbed.TUNED_LR["dr_grpo"])
    assert calibrated_config("oracle_explore").lr == testbed.TUNED_LR["grpo"]  # LR_SHARED
    # overrides win over the calibration; options the arm writes are merged over it
    assert calibrated_config("sage", kl_coef=0.05, method_options={"tau": 1.2}).method_options == {"tau": 1.2}
    assert calibrated_config("c3po", method_options={"samples": 4}).method_options == {
        "ess": 1e8, "clip_radius": 0.254, "lr": 0.216, "samples": 4}


@pytest.fixture
def unregistered_pair():
    """``nudgerl+sage`` as no `compose` call has registered it (another test may have chosen its conflicting keys)."""
    saved = METHODS.pop("nudgerl+sage", None)
    yield "nudgerl+sage"
    METHODS.pop("nudgerl+sage", None)
    if saved is not None:
        METHODS["nudgerl+sage"] = saved


def test_a_composite_takes_the_keys_its_testbed_presets_agree_on_and_refuses_the_others(unregistered_pair):
    with pytest.raises(ValueError, match=r"testbed presets set different values of \['kl_coef'\]"):
        calibrated_config(unregistered_pair)
    cfg = calibrated_config(unregistered_pair, kl_coef=0.2)
    assert cfg.lr == testbed.TUNED_LR["nudgerl"] == testbed.TUNED_LR["sage"]  # their tuned lrs agree
    assert cfg.method_options == {"sage": {"tau": testbed.TESTBED_TAU}}
    assert key_train(cfg)["method_options"] is None  # the key holds the options as written: none


def test_keys_hold_options_as_written_and_round_trip():
    cfg = calibrated_config("b3po", method_options={"noise_scale": 0.0})
    assert key_train(cfg)["method_options"] == {"noise_scale": 0.0}
    assert config_from_key(key_train(cfg)) == cfg
    assert train_from_key(key_train(calibrated_config("sage")))["method_options"] == {"tau": 0.24}
    plain = calibrated_config("grpo")
    assert key_train(plain) == plain.to_dict()  # nothing calibrated in the options: the key is the config


def _committed_records():
    root = results_root()
    for path in sorted(root.glob("*/*.json")):
        if path.parent.name in ("testbed", "bench", "notebooks", "archive"):
            continue
        record = json.loads(path.read_text())
        train = (record.get("config") or {}).get("train") if isinstance(record, dict) else None
        if isinstance(train, dict) and train.get("method") in METHODS:
            yield path, record, train


def test_every_committed_record_keeps_its_key_and_options_under_the_calibration():
    """Each committed record's config, as the study trains it now (the calibration put back), has the record's key
    and every method option the record stored (an option added since, e.g. C3PO's ``scheme``, is the fidelity pass's
    and keeps its record stale): the move out of the presets changed no run."""
    seen, retired = 0, []
    for path, record, train in _committed_records():
        try:
            config = config_from_key(train)
        except ValueError:  # a setting renamed since (the sweep's NudgeRL runs: advantage "context", now "hint")
            retired.append(path)
            continue
        if path.parent.name == "lr_tuning":  # the sweep writes the lr it tunes over the options as written
            cls = METHODS[config.method].cls
            written = cls.with_tuning_lr(TrainerConfig.from_dict(key_train(config)), cls.tuning_lr(config))
            assert written.to_dict() == train, path
        else:
            assert key_train(config) == train, path
        stored = (record.get("extra") or {}).get("method_options")
        if stored is not None:
            now = resolved_method_options(config)
            assert {k: now.get(k) for k in stored} == stored, path
        seen += 1
    assert seen > 500 and all(p.parent.name == "lr_tuning" for p in retired) and len(retired) <= 6


def test_testbed_config_command_writes_a_settings_file_the_library_trains_from(tmp_path):
    from rlvr_lib.config_files import config_from_file
    from rlvr_lib.study.__main__ import main

    out = tmp_path / "sage.yaml"
    assert main(["testbed-config", "sage", "--out", str(out)]) == 0
    settings = yaml.safe_load(out.read_text())
    assert settings == {"method": "sage", "lr": testbed.TUNED_LR["sage"], "kl_coef": 0.2,
                        "method_options": {"tau": 0.24}}
    assert config_from_file(out) == calibrated_config("sage")
    with pytest.raises(SystemExit) as exit_info:
        main(["testbed-config", "no_such_method"])
    assert exit_info.value.code == 2
