"""Tests for rlvr_lib.config: validation messages, JSON round trips, hashing."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Optional

import pytest

from rlvr_lib.config import ConfigBase, canonical_json, hash_jsonable


class Agg(enum.Enum):
    TOKEN = "token-mean"
    SEQ = "seq-mean"


@dataclass(frozen=True)
class KLCfg(ConfigBase):
    kind: str = "k3"
    coef: float = 0.0

    def validate(self) -> None:
        self.check_choice("kind", self.kind, ("k1", "k3", "none"))
        self.check_nonnegative("coef", self.coef)


@dataclass(frozen=True)
class TrainCfg(ConfigBase):
    lr: float = 1e-6
    group_size: int = 8
    p_drop: float = 0.5
    clip: tuple[float, float] = (0.2, 0.28)
    hints: tuple[str, ...] = ()
    kl: Optional[KLCfg] = None
    anchors: list[KLCfg] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    agg: Agg = Agg.TOKEN
    max_len: int | None = None

    def validate(self) -> None:
        self.check_range("lr", self.lr, 0.0, 1.0, lo_open=True)
        self.check_positive_int("group_size", self.group_size)
        self.check_probability("p_drop", self.p_drop)
        if self.max_len is not None:
            self.check_positive_int("max_len", self.max_len)


@dataclass(frozen=True)
class Required(ConfigBase):
    name: str
    n: int = 1


# ------------------------------------------------------------- validation
def test_defaults_valid_and_frozen():
    cfg = TrainCfg()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"lr": -1.0}, "TrainCfg.lr=-1.0 is invalid: must be a number in (0, 1]"),
        ({"lr": 0.0}, "TrainCfg.lr=0.0 is invalid: must be a number in (0, 1]"),
        ({"lr": float("nan")}, "TrainCfg.lr=nan is invalid"),
        ({"lr": True}, "TrainCfg.lr=True is invalid"),
        ({"group_size": 0}, "TrainCfg.group_size=0 is invalid: must be an integer >= 1"),
        ({"group_size": 2.0}, "TrainCfg.group_size=2.0 is invalid: must be an integer >= 1"),
        ({"p_drop": 1.5}, "TrainCfg.p_drop=1.5 is invalid: must be a number in [0, 1]"),
        ({"max_len": -3}, "TrainCfg.max_len=-3 is invalid"),
    ],
)
def test_invalid_values_name_class_field_value_and_rule(kwargs, message):
    with pytest.raises(ValueError) as e:
        TrainCfg(**kwargs)
    assert message in str(e.value)


def test_check_choice_lists_choices():
    with pytest.raises(ValueError, match=r"KLCfg.kind='k2' is invalid: must be one of \['k1', 'k3', 'none'\]"):
        KLCfg(kind="k2")


def test_check_range_bounds_and_open_ends():
    ConfigBase.check_range("x", 1, 0, 1)
    ConfigBase.check_range("x", 5, 0, None)
    with pytest.raises(ValueError, match=r"must be a number in \[0, 1\)"):
        ConfigBase.check_range("x", 1, 0, 1, hi_open=True)
    with pytest.raises(ValueError, match=r"must be a number in \(-inf, 0\]"):
        ConfigBase.check_range("x", 0.5, None, 0)
    with pytest.raises(ValueError, match=r"must be a number in \(0, inf\)"):
        ConfigBase.check_positive("x", 0)
    with pytest.raises(ValueError, match="ConfigBase.x='a' is invalid"):
        ConfigBase.check_range("x", "a", 0, 1)


def test_nested_config_validated_on_construction():
    with pytest.raises(ValueError, match="KLCfg.coef=-1.0"):
        TrainCfg(kl=KLCfg(coef=-1.0))


def test_replace_validates_and_rejects_unknown_fields():
    cfg = TrainCfg()
    assert cfg.replace(lr=0.5).lr == 0.5
    with pytest.raises(ValueError, match="TrainCfg.lr=2.0"):
        cfg.replace(lr=2.0)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['learning_rate'\]; valid fields: .*'lr'"):
        cfg.replace(learning_rate=0.1)


# ------------------------------------------------------------- round trip
def _full_cfg() -> TrainCfg:
    return TrainCfg(
        lr=3e-4,
        group_size=16,
        clip=(0.2, 0.4),
        hints=("shoelace", "vieta"),
        kl=KLCfg(kind="k1", coef=0.01),
        anchors=[KLCfg(), KLCfg(kind="none")],
        weights={"a": 1.0, "b": 0.5},
        agg=Agg.SEQ,
        max_len=64,
    )


@pytest.mark.parametrize("cfg", [TrainCfg(), _full_cfg()])
def test_dict_and_json_round_trip(cfg, tmp_path):
    d = cfg.to_dict()
    json.dumps(d, allow_nan=False)  # strictly JSON-compatible
    assert isinstance(d["clip"], list)
    assert TrainCfg.from_dict(d) == cfg
    back = TrainCfg.from_json(cfg.to_json())
    assert back == cfg
    assert isinstance(back.clip, tuple) and isinstance(back.hints, tuple)
    assert back.kl is None or isinstance(back.kl, KLCfg)
    assert all(isinstance(a, KLCfg) for a in back.anchors)
    p = tmp_path / "cfg.json"
    cfg.to_json(p)
    assert TrainCfg.from_json(p) == cfg
    assert TrainCfg.from_json(str(p)) == cfg


def test_from_dict_coerces_int_to_float():
    cfg = TrainCfg.from_dict({"lr": 1, "p_drop": 0})
    assert isinstance(cfg.lr, float) and cfg.lr == 1.0 and isinstance(cfg.p_drop, float)


def test_from_dict_unknown_key_lists_valid_keys():
    with pytest.raises(ValueError) as e:
        TrainCfg.from_dict({"lr": 0.1, "lrr": 0.1})
    msg = str(e.value)
    assert "unknown key(s) ['lrr']" in msg and "valid keys:" in msg and "'group_size'" in msg


def test_from_dict_unknown_key_in_nested_config():
    with pytest.raises(ValueError, match=r"TrainCfg.kl: unknown key\(s\) \['coeff'\]; valid keys: \['coef', 'kind'\]"):
        TrainCfg.from_dict({"kl": {"coeff": 1.0}})


def test_from_dict_missing_required_and_wrong_shapes():
    with pytest.raises(ValueError, match=r"missing required key\(s\) \['name'\]"):
        Required.from_dict({"n": 2})
    with pytest.raises(ValueError, match="expected 2 items"):
        TrainCfg.from_dict({"clip": [0.1, 0.2, 0.3]})
    with pytest.raises(ValueError, match="TrainCfg.group_size: expected int"):
        TrainCfg.from_dict({"group_size": "8"})
    with pytest.raises(ValueError, match="expected a mapping"):
        TrainCfg.from_dict([("lr", 0.1)])  # type: ignore[arg-type]


def test_from_dict_still_validates():
    with pytest.raises(ValueError, match="TrainCfg.p_drop=2.0 is invalid"):
        TrainCfg.from_dict({"p_drop": 2.0})


# ------------------------------------------------------------------ hash
def test_config_hash_stable_and_sensitive():
    a, b = TrainCfg(), TrainCfg()
    assert a.config_hash() == b.config_hash()
    assert len(a.config_hash()) == 12 and all(c in "0123456789abcdef" for c in a.config_hash())
    assert a.config_hash() != a.replace(lr=2e-6).config_hash()
    assert a.config_hash() != a.replace(kl=KLCfg()).config_hash()
    # hash is of canonical JSON: key order does not matter, and equals the dict's hash
    assert hash_jsonable({"b": 1, "a": 2}) == hash_jsonable({"a": 2, "b": 1})
    assert a.config_hash() == hash_jsonable(a.to_dict())
    assert canonical_json({"b": 1, "a": (1, 2)}) == '{"a":[1,2],"b":1}'


def test_canonical_json_rejects_nan():
    with pytest.raises(ValueError):
        canonical_json({"x": math.nan})
