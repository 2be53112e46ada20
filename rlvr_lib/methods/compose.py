"""Composing methods: ``compose("nudgerl", "sage", kl_coef=0.2)`` registers ``"nudgerl+sage"``.

A composite is a plain registered `Method` holding one hook object per component (built with
``method=<component>``, ``method_options=<its part>``). **Exclusive hooks** (:data:`EXCLUSIVE`): at most one
component may override a family; the composite calls the owner's hook (GRPO's default when none does), and
two owners raise ``ValueError`` naming the hook and both methods:

======================  =========================================================  ==================================
family                  hooks (and class attributes)                              why one owner
======================  =========================================================  ==================================
``hints``               ``hints``, ``credits_hint_free``                           one hint per rollout, one credit
``sampling``            ``sampling_temperature``                                   one temperature per step
``weight space``        ``weight_samples``, ``perturbed``, ``make_optimizer``      one optimizer, one posterior
``rewards``             ``rewards``, ``uses_verifier_reward``                      one reward per rollout
``dynamic sampling``    ``keep_groups``, ``refill_rounds``                         one filter of the groups
``advantages``          ``advantages``, ``advantage_options``                      one estimator (``config.advantage``)
``policy_loss``         ``policy_loss``                                            one surrogate per token
``anchor``              ``anchor``                                                 one reference anchor per token
``tuning lr``           ``tuning_lr``, ``with_tuning_lr``                          one lr that a tuning grid scales
======================  =========================================================  ==================================

**Combined hooks** (:data:`COMBINED`): every overriding component's, in the order given to `compose`;
``extra_loss`` is L_extra = sum_c L_extra,c, and a stat, ``metrics`` or ``batch.extras`` key written by two
components is an error. One overriding component: its result untouched (``compose("sage", "grpo")``
trains bit-identically to ``"sage"``). ``method_options`` is ``{component: its options}``. The preset
(:func:`composite_preset`) merges the components' claimed keys; a conflict is refused unless passed to
`compose`. Not from a paper: this library's composition of the papers' methods.

Every rule (binding, options, presets, names not yet registered): docs/methods/compose.md.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping

from rlvr_lib.config import ConfigBase
from rlvr_lib.methods.base import Method
from rlvr_lib.methods.registry import METHODS, NAME_RESOLVERS, register_method, unknown_method
from rlvr_lib.trainer_config import TrainerConfig

__all__ = ["COMBINED", "EXCLUSIVE", "ComposedOptions", "Composite", "PresetConflict", "compose", "composite_preset",
           "ensure_registered", "hook_conflicts", "hook_owners", "merged_claims", "pair_table", "preset_conflicts"]

SEPARATOR = "+"
IDENTITY = "grpo"
"""The component that adds nothing: `Method` itself, whose preset is the one every other preset overrides."""

EXCLUSIVE: dict[str, tuple[str, ...]] = {
    "hints": ("hints", "credits_hint_free"),
    "sampling": ("sampling_temperature",),
    "weight space": ("weight_samples", "perturbed", "make_optimizer"),
    "rewards": ("rewards", "uses_verifier_reward"),
    "dynamic sampling": ("keep_groups", "refill_rounds"),
    "advantages": ("advantages", "advantage_options"),
    "policy_loss": ("policy_loss",),
    "anchor": ("anchor",),
    "tuning lr": ("tuning_lr", "with_tuning_lr"),
}
"""Families of hooks that at most one component may override (the module docstring says why)."""

COMBINED: tuple[str, ...] = ("on_step_start", "before_update", "extra_loss", "on_step_end", "state_dict",
                             "load_state_dict", "check_task")
"""Hooks every overriding component runs, in the order of the names (docs/methods/compose.md gives each rule;
``check_task``: each component checks the task when it is built)."""

DERIVED: tuple[str, ...] = ("reads_parameters",)
"""Class attributes a composite takes from all its components: true when any component's is."""

UNITED: tuple[str, ...] = ("token_mean_stats", "summed_metrics")
"""Class attributes (sets of metric keys) a composite takes from all its components: their union."""

_CLASS_ATTRS = ("uses_verifier_reward", "credits_hint_free")
_CLASSMETHODS = ("tuning_lr", "with_tuning_lr")


def _static(cls: type, hook: str) -> Any:
    """``hook`` as the class defines it (a classmethod's function, not a fresh bound method)."""
    value = inspect.getattr_static(cls, hook)
    return getattr(value, "__func__", value)


def overrides(cls: type, hook: str) -> bool:
    """Whether ``cls`` changes ``hook`` (a hook or a class attribute) from `Method`'s default (GRPO)."""
    if hook in _CLASS_ATTRS:
        return getattr(cls, hook) != getattr(Method, hook)
    return _static(cls, hook) is not _static(Method, hook)


def hook_conflicts(names: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """Per exclusive family that two or more of ``names`` override: ``{component: the hooks it overrides}``."""
    out = {}
    for family, hooks in EXCLUSIVE.items():
        claimed = {n: [h for h in hooks if overrides(METHODS[n].cls, h)] for n in names}
        claimed = {n: hs for n, hs in claimed.items() if hs}
        if len(claimed) > 1:
            out[family] = claimed
    return out


def hook_owners(names: tuple[str, ...]) -> dict[str, str | None]:
    """Per exclusive family, the one component that overrides it (``None``: GRPO's default); ValueError on two."""
    conflicts = hook_conflicts(names)
    if conflicts:
        family, claimed = next(iter(conflicts.items()))
        (a, ha), (b, hb) = list(claimed.items())[:2]
        raise ValueError(
            f"compose{names!r}: {a!r} overrides {_ticks(ha)} and {b!r} overrides {_ticks(hb)}: "
            f"both override the {family!r} hooks ({_ticks(EXCLUSIVE[family])}), which have no combination "
            "rule (at most one component may own them; see rlvr_lib.methods.compose)")
    return {family: next((n for n in names if any(overrides(METHODS[n].cls, h) for h in hooks)), None)
            for family, hooks in EXCLUSIVE.items()}


def _ticks(hooks) -> str:
    return ", ".join(f"`{h}`" for h in hooks)


# ----------------------------------------------------------------------------- options
@dataclass(frozen=True)
class ComposedOptions(ConfigBase):
    """Base of a composite's ``Options``: one field per component, validated by that component's ``Options``."""

    COMPONENTS: ClassVar[dict[str, type]] = {}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping {{component: options}}, got {type(data).__name__} {data!r}")
        unknown = sorted(set(data) - set(cls.COMPONENTS))
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}: method_options of a composite is "
                             f"{{component: options}} with components {list(cls.COMPONENTS)}")
        parts = {}
        for name, options_cls in cls.COMPONENTS.items():
            try:
                parts[name] = options_cls.from_dict(data.get(name) or {})
            except ValueError as err:
                raise ValueError(f"component {name!r}: {err}") from None
        return cls(**parts)


def _options_class(names: tuple[str, ...]) -> type:
    """A frozen `ComposedOptions` dataclass with one field per component (its ``Options``, defaults filled)."""
    for n in names:
        if not n.isidentifier():
            raise ValueError(f"compose{names!r}: component name {n!r} is not an identifier, so it cannot "
                             "name a field of the composite's options")
    spec = [(n, METHODS[n].cls.Options, dataclasses.field(default_factory=METHODS[n].cls.Options)) for n in names]
    cls = dataclasses.make_dataclass("Options_" + "_".join(names), spec, bases=(ComposedOptions,), frozen=True)
    cls.COMPONENTS = {n: METHODS[n].cls.Options for n in names}
    return cls


def component_config(config, name: str):
    """The composite ``config`` as component ``name`` sees it: ``method=name``, its part of ``method_options``."""
    return config.replace(method=name, method_options=(config.method_options or {}).get(name))


# ----------------------------------------------------------------------------- the class
def _exclusive_delegate(hook: str, owner: str):
    def delegate(self, *args, **kwargs):
        return getattr(self.components[owner], hook)(*args, **kwargs)

    delegate.__name__ = hook
    delegate.__doc__ = f"{owner!r}'s ``{hook}``."
    return delegate


def _class_delegates(owner: str) -> dict[str, classmethod]:
    """``tuning_lr`` / ``with_tuning_lr`` of the owner, on the owner's view of the composite config."""
    owner_cls = METHODS[owner].cls

    def tuning_lr(cls, config) -> float:
        return owner_cls.tuning_lr(component_config(config, owner))

    def with_tuning_lr(cls, config, lr: float):
        before = component_config(config, owner)
        after = owner_cls.with_tuning_lr(before, lr)
        changed = {f.name: getattr(after, f.name) for f in fields(after)
                   if f.name not in ("method", "method_options") and getattr(after, f.name) != getattr(before, f.name)}
        options = {**(config.method_options or {}), owner: after.method_options}
        return config.replace(**changed, method_options=options)

    return {"tuning_lr": classmethod(tuning_lr), "with_tuning_lr": classmethod(with_tuning_lr)}


def _check_disjoint(seen: dict[str, str], name: str, keys, what: str) -> None:
    """Record that component ``name`` wrote ``keys``; a key an earlier component wrote is an error."""
    for key in keys:
        if key in seen:
            raise ValueError(f"composite: {seen[key]!r} and {name!r} both write {what} {key!r}; "
                             "compose methods whose keys differ")
        seen[key] = name


def _written(before: dict, after: dict) -> list:
    """Keys of ``after`` that are new or hold another object than in ``before``."""
    return [k for k, v in after.items() if k not in before or before[k] is not v]


class PresetConflict(ValueError):
    """Two components' presets set one key differently and the caller did not choose it."""


class Composite(Method):
    """Base of the classes `compose` builds: holds the components and runs the combined hooks."""

    COMPONENTS: ClassVar[tuple[str, ...]] = ()
    OWNERS: ClassVar[dict[str, str | None]] = {}
    PRESET_UNRESOLVED: ClassVar[tuple[str, ...]] = ()
    """Preset keys left out because the components disagree and no one chose them (`ensure_registered`)."""

    def __init__(self, config):
        super().__init__(config)
        self.components: dict[str, Method] = {n: METHODS[n].cls(component_config(config, n)) for n in self.COMPONENTS}
        self._bind_owned_hooks()

    def _bind_owned_hooks(self) -> None:
        """Make each component's ``self.<exclusive hook>`` the owner's, so cross-hook calls see the composite."""
        for family, owner in self.OWNERS.items():
            if owner is None:
                continue
            for hook in EXCLUSIVE[family]:
                if hook in _CLASS_ATTRS or hook in _CLASSMETHODS or not overrides(METHODS[owner].cls, hook):
                    continue
                for name, component in self.components.items():
                    if name != owner:
                        setattr(component, hook, getattr(self.components[owner], hook))

    def _overriding(self, hook: str) -> list[tuple[str, Method]]:
        return [(n, c) for n, c in self.components.items() if overrides(type(c), hook)]

    def on_step_start(self, step: int) -> None:
        super().on_step_start(step)
        for component in self.components.values():
            component.on_step_start(step)

    def state_dict(self) -> dict:
        return {n: c.state_dict() for n, c in self.components.items()}

    def load_state_dict(self, state: dict) -> None:
        missing = sorted(set(self.components) - set(state))
        if missing:
            raise ValueError(f"{self.name}: checkpointed method state lacks component(s) {missing} "
                             f"(has {sorted(state)})")
        for n, c in self.components.items():
            c.load_state_dict(state[n])

    # The three below are attached by `compose` only when a component overrides them, so that a
    # composite overrides exactly what its components do (the TRL backend asks `type(method)`).
    def _before_update(self, batch, model) -> None:
        seen: dict[str, str] = {}
        for name, component in self._overriding("before_update"):
            before = dict(batch.extras)
            component.before_update(batch, model)
            _check_disjoint(seen, name, _written(before, batch.extras), "batch.extras")

    def _extra_loss(self, batch, model, logp, entropy, mask):
        parts = [(n, c.extra_loss(batch, model, logp, entropy, mask)) for n, c in self._overriding("extra_loss")]
        if len(parts) == 1:  # one term: returned untouched (bit-identical to the component alone)
            return parts[0][1]
        total, stats, seen = 0.0, {}, {}
        for name, (term, term_stats) in parts:
            _check_disjoint(seen, name, term_stats, "the extra_loss stat")
            total = total + term
            stats.update(term_stats)
        return total, stats

    def _on_step_end(self, step: int, metrics: dict) -> None:
        seen: dict[str, str] = {}
        for name, component in self._overriding("on_step_end"):
            before = dict(metrics)
            component.on_step_end(step, metrics)
            _check_disjoint(seen, name, _written(before, metrics), "the metric")


_OPTIONAL_COMBINED = {"before_update": Composite._before_update, "extra_loss": Composite._extra_loss,
                      "on_step_end": Composite._on_step_end}


def _composite_class(names: tuple[str, ...], owners: dict[str, str | None]) -> type:
    """The `Composite` subclass of ``names``: delegates owned exclusive hooks, runs the combined ones."""
    body: dict[str, Any] = {"COMPONENTS": names, "OWNERS": owners, "Options": _options_class(names),
                            "__doc__": _composite_doc(names, owners), "__module__": __name__,
                            **{attr: any(getattr(METHODS[n].cls, attr) for n in names) for attr in DERIVED},
                            **{attr: frozenset().union(*(getattr(METHODS[n].cls, attr) for n in names))
                               for attr in UNITED}}
    for family, owner in owners.items():
        if owner is None:
            continue
        for hook in EXCLUSIVE[family]:
            if not overrides(METHODS[owner].cls, hook):  # the owner keeps GRPO's default there: so does the composite
                continue
            if hook in _CLASS_ATTRS:
                body[hook] = getattr(METHODS[owner].cls, hook)
            elif hook not in _CLASSMETHODS:
                body[hook] = _exclusive_delegate(hook, owner)
        if family == "tuning lr":
            body.update(_class_delegates(owner))
    for hook, impl in _OPTIONAL_COMBINED.items():
        if any(overrides(METHODS[n].cls, hook) for n in names):
            body[hook] = impl
    return type("Composite_" + "_".join(names), (Composite,), body)


def _composite_doc(names: tuple[str, ...], owners: dict[str, str | None]) -> str:
    owned = [f"``{family}`` from {owner!r}" for family, owner in owners.items() if owner is not None]
    combined = [f"``{hook}`` of {', '.join(repr(n) for n in names if overrides(METHODS[n].cls, hook))}"
                for hook in COMBINED if any(overrides(METHODS[n].cls, hook) for n in names)]
    return (f"Composite of {' + '.join(names)} (`rlvr_lib.methods.compose`): "
            f"{'; '.join(owned) or 'every exclusive hook GRPO’s'}; "
            f"in order, {'; '.join(combined) or 'no combined hook'}.")


# ----------------------------------------------------------------------------- presets
def _claims(name: str) -> tuple[dict, float | None]:
    """The `TrainerConfig` keys component ``name`` fixes (its preset) and its registered lr; ``"grpo"`` fixes none."""
    if name == IDENTITY:
        return {}, None
    return dict(METHODS[name].preset), METHODS[name].tuned_lr


def merged_claims(names: tuple[str, ...], claims=None):
    """The components' claims merged: (preset, per-component options, tuned lrs, conflicts ``{key: {name: value}}``).

    ``claims(name) -> (preset, tuned lr)``; default: the registered preset and lr.
    """
    claims_of = claims or _claims
    preset: dict = {}
    owner: dict[str, str] = {}
    conflicts: dict[str, dict[str, Any]] = {}
    options: dict[str, dict] = {}
    tuned: dict[str, float] = {}
    for name in names:
        claims, lr = claims_of(name) if name != IDENTITY else ({}, None)
        if "method_options" in claims:  # a preset's options belong to its component
            options[name] = claims.pop("method_options")
        if lr is not None:
            tuned[name] = lr
        for key, value in claims.items():
            if key in preset and preset[key] != value:
                conflicts.setdefault(key, {owner[key]: preset[key]})[name] = value
            else:
                preset.setdefault(key, value)
                owner.setdefault(key, name)
    # The tuned lr wins over a preset's lr in `method_config`, so it is claimed like a key of its own.
    effective = {n: tuned.get(n, (claims_of(n) if n != IDENTITY else ({}, None))[0].get("lr")) for n in names}
    effective = {n: lr for n, lr in effective.items() if lr is not None}
    if len(set(effective.values())) > 1:
        conflicts["lr"] = effective
    return preset, options, tuned, conflicts


def preset_conflicts(names: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The `TrainerConfig` keys two of ``names`` fix to different values: ``{key: {component: value}}``."""
    return merged_claims(names)[3]


def composite_preset(names: tuple[str, ...], resolve: dict) -> tuple[dict, float | None]:
    """The composite's preset and tuned lr; ``resolve`` settles conflicts (else ValueError naming each key)."""
    preset, options, tuned, conflicts = merged_claims(names)
    unresolved = {k: v for k, v in conflicts.items() if k not in resolve}
    if unresolved:
        listed = "; ".join(f"{k}: " + ", ".join(f"{n!r} {v!r}" for n, v in vals.items())
                           for k, vals in sorted(unresolved.items()))
        example = ", ".join(f"{k}=..." for k in sorted(unresolved))
        raise PresetConflict(f"compose{names!r}: the presets set different values of {sorted(unresolved)} ({listed}); "
                         f"choose them: compose({', '.join(repr(n) for n in names)}, {example}), "
                         "or give them to method_config (a config file: set them)")
    if options:
        preset["method_options"] = options
    preset.update(resolve)
    tuned_lr = None if "lr" in resolve else next(iter(set(tuned.values())), None)
    return preset, tuned_lr


# ----------------------------------------------------------------------------- compose
def _check_names(names: tuple[str, ...]) -> None:
    if len(names) < 2:
        raise ValueError(f"compose{names!r}: give two or more registered methods (one method is itself)")
    if len(set(names)) != len(names):
        raise ValueError(f"compose{names!r}: a method is named twice; each component is one hook object")
    for n in names:
        if n not in METHODS:
            raise unknown_method(n)
        if issubclass(METHODS[n].cls, Composite):
            flat = METHODS[n].cls.COMPONENTS + tuple(x for x in names if x != n)
            raise ValueError(f"compose{names!r}: {n!r} is a composite; compose its components directly: "
                             f"compose({', '.join(repr(c) for c in flat)})")


def compose(*names: str, **resolve) -> str:
    """Register the composite of the methods ``names`` (in this hook order) and return its name, ``"+".join(names)``.

    ``resolve``: `TrainerConfig` fields that settle the presets' conflicts. Composing the same names again returns
    the name. Raises ValueError on fewer than two, repeated, unknown or composite names, two owners of an exclusive
    hook family, an unknown ``resolve`` key or another preset under the name; `PresetConflict` on an unresolved
    preset conflict.
    """
    names = tuple(names)
    _check_names(names)
    bad = sorted(set(resolve) - (set(TrainerConfig.__dataclass_fields__) - {"method"}))
    if bad:
        raise ValueError(f"compose{names!r}: resolve key(s) {bad} are not TrainerConfig fields (method excluded)")
    name = SEPARATOR.join(names)
    owners = hook_owners(names)
    registered = METHODS.get(name)
    partial = registered is not None and registered.cls.PRESET_UNRESOLVED
    if registered is not None and not resolve and not partial:
        return name
    preset, tuned_lr = composite_preset(names, resolve)
    if registered is not None and not partial:
        if (registered.preset, registered.tuned_lr) != (preset, tuned_lr):
            raise ValueError(f"compose{names!r}: {name!r} is registered with preset {registered.preset} "
                             f"(tuned lr {registered.tuned_lr}); this call gives {preset} (tuned lr {tuned_lr}). "
                             "Pass the other values to method_config instead")
        return name
    if partial:  # registered from a config without its conflicting keys: this call chooses them
        del METHODS[name]
    register_method(name, _composite_class(names, owners), f"composite: {' + '.join(names)}", tuned_lr=tuned_lr,
                    **preset)
    return name


def ensure_registered(name: str, *, preset: bool = False, given=frozenset()) -> None:
    """Register the composite ``name`` (``"a+b"``) if it is not registered yet; other names: do nothing.

    One of `rlvr_lib.methods.registry.NAME_RESOLVERS`. Conflicting preset keys are left out; with ``preset=True`` a
    conflicting key not in ``given`` raises `PresetConflict`. ValueError on an unknown component or two owners.
    """
    if SEPARATOR not in name:
        return
    names = tuple(name.split(SEPARATOR))
    if name not in METHODS:
        try:
            compose(*names)
        except PresetConflict:
            _register_partial(names)
    if preset and METHODS[name].cls.PRESET_UNRESOLVED:
        composite_preset(names, dict.fromkeys(given))  # raises on a key not given, naming each method's value


def _register_partial(names: tuple[str, ...]) -> None:
    """Register the composite of ``names`` with the keys its presets disagree on left out of its preset."""
    merged, options, tuned, conflicts = merged_claims(names)
    for key in conflicts:
        merged.pop(key, None)
    if options:
        merged["method_options"] = options
    cls = _composite_class(names, hook_owners(names))
    cls.PRESET_UNRESOLVED = tuple(sorted(conflicts))
    tuned_lr = None if "lr" in conflicts else next(iter(set(tuned.values())), None)
    register_method(SEPARATOR.join(names), cls, f"composite: {' + '.join(names)} (preset keys "
                    f"{list(cls.PRESET_UNRESOLVED)} not chosen)", tuned_lr=tuned_lr, **merged)


NAME_RESOLVERS.append(ensure_registered)


# ----------------------------------------------------------------------------- the pair table
def pair_table(names: tuple[str, ...]) -> str:
    """The Markdown table of which pairs of ``names`` compose, by `compose`'s rules (registers nothing).

    README's table is this output for the study's methods. ValueError unless ``names`` holds two or more methods.
    """
    if isinstance(names, str) or len(names) < 2:
        raise ValueError(f"names={names!r} is invalid: must be a sequence of at least two registered method names")
    for name in names:
        if name not in METHODS:
            raise unknown_method(name)
    rows = ["| pair | composes? | why |", "|---|---|---|"]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rows.append(f"| {a} + {b} | " + " | ".join(_pair_verdict(a, b)) + " |")
    return "\n".join(rows)


def _pair_verdict(a: str, b: str) -> tuple[str, str]:
    names = (a, b)
    presets = preset_conflicts(names)
    clash = hook_conflicts(names)
    if clash:
        why = "; ".join(" vs ".join(f"{n} overrides {_ticks(hs)}" for n, hs in claimed.items())
                        + f" (one {family} owner at most)" for family, claimed in clash.items())
        if presets:
            why += f"; the presets differ on {_listed(presets)} too"
        return "refused", why
    owners = hook_owners(names)
    owned = "; ".join(f"{n} owns {', '.join(f for f, o in owners.items() if o == n)}"
                      for n in names if n in owners.values())
    combined = [h for h in COMBINED[1:4] if all(overrides(METHODS[n].cls, h) for n in names)]
    why = owned + (f"; both run {', '.join(f'`{h}`' for h in combined)}, in order" if combined else "")
    if presets:
        return f"yes, once {_listed(presets)} {'is' if len(presets) == 1 else 'are'} chosen", why
    return "yes", why


def _listed(conflicts: dict[str, dict[str, Any]]) -> str:
    """``kl_coef`` (0 vs 0.2), ...: each conflicting key with the components' values, in their order."""
    def show(v):
        return f"{v:.3g}" if isinstance(v, float) else repr(v)

    return ", ".join(f"`{k}` ({' vs '.join(show(v) for v in vals.values())})" for k, vals in sorted(conflicts.items()))
