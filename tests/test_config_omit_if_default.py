"""Fields marked ``omit_if_default``: added to a config without changing existing hashes."""

from dataclasses import dataclass, field

import pytest

from rlvr_lib.config import OMIT_IF_DEFAULT, ConfigBase


@dataclass(frozen=True)
class Before(ConfigBase):
    lr: float = 0.1
    families: tuple[str, ...] = ("a", "b")


@dataclass(frozen=True)
class After(ConfigBase):
    lr: float = 0.1
    families: tuple[str, ...] = ("a", "b")
    task: str = field(default="arith", metadata={OMIT_IF_DEFAULT: True})
    tags: tuple[str, ...] = field(default_factory=tuple, metadata={"omit_if_default": True})

    def validate(self) -> None:
        self.check_choice("task", self.task, ("arith", "echo"))


@dataclass(frozen=True)
class Outer(ConfigBase):
    inner: After = After()
    steps: int = 3


def test_default_is_left_out_and_hash_equals_the_class_without_the_field():
    assert After().to_dict() == Before().to_dict() == {"lr": 0.1, "families": ["a", "b"]}
    assert After().config_hash() == Before().config_hash()
    assert After(lr=0.5).config_hash() == Before(lr=0.5).config_hash()
    assert After().to_json() == Before().to_json()


def test_non_default_is_included_and_changes_the_hash():
    cfg = After(task="echo", tags=("x",))
    assert cfg.to_dict() == {"lr": 0.1, "families": ["a", "b"], "task": "echo", "tags": ["x"]}
    assert cfg.config_hash() != After().config_hash()
    assert After(tags=("x",)).to_dict() == {"lr": 0.1, "families": ["a", "b"], "tags": ["x"]}


def test_round_trip_with_and_without_the_field(tmp_path):
    for cfg in (After(), After(task="echo"), After(lr=0.2, tags=("y", "z"))):
        assert After.from_dict(cfg.to_dict()) == cfg
        assert After.from_json(cfg.to_json(tmp_path / "c.json")) == cfg
    # A record written before the field existed reads back with the default.
    assert After.from_dict(Before(lr=0.3).to_dict()) == After(lr=0.3)
    # from_dict still validates the field when it is present.
    with pytest.raises(ValueError, match="After.task='aime'"):
        After.from_dict({"task": "aime"})


def test_nested_config_omits_its_default_fields():
    assert Outer().to_dict() == {"inner": {"lr": 0.1, "families": ["a", "b"]}, "steps": 3}
    nested = Outer(inner=After(task="echo"))
    assert nested.to_dict()["inner"]["task"] == "echo"
    assert Outer.from_dict(nested.to_dict()) == nested
    assert Outer.from_dict(Outer().to_dict()) == Outer()
