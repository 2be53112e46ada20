"""Claims tables: each paper claim's verdict at our scale, from its 95% interval.

:func:`claims_table` builds a notebook's table from its pre-registered rows, :func:`verdict` reads one row's
interval against its threshold, :func:`min_effect` is the minimum-effect rule; :func:`measurements_table` and
:func:`instrument_checks` hold the rows that are not paper claims; :func:`claims_summary` writes the markdown a
notebook opens with, read back by :func:`find_claims_headline` / :func:`find_claims_counts` for README.

A row whose premise is measured absent on its regime gets :data:`PREMISE_ABSENT` instead of its interval's
verdict (kept in ``verdict_if_premise``); headlines and the scorecard count it apart. Rules:
docs/study/claims.md.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from rlvr_lib.study.runs import NAME_RE
from rlvr_lib.study.stats import bootstrap_ci, format_ci, has_interval
from rlvr_lib.validation import check, check_choice, check_range

__all__ = [
    "AGAINST",
    "CHANCE_LEVEL",
    "CHECK_COLUMNS",
    "CHECK_KINDS",
    "CLAIMS_COLUMNS",
    "CONTRADICTED",
    "EFFECT_FRACTION",
    "EXPECTS",
    "LARGE_EFFECT",
    "MEASUREMENT_COLUMNS",
    "NOT_SPECIFIC",
    "OPENING_TAG",
    "PAPER_NAMES",
    "PREMISE_ABSENT",
    "TESTED",
    "REPRODUCED",
    "UNRESOLVED",
    "VERDICTS",
    "TESTBED_LIMITS",
    "claims_headline",
    "claims_reading",
    "claims_rows",
    "claims_summary",
    "claims_table",
    "notebook_outputs",
    "opening_summary",
    "find_claims_counts",
    "find_claims_headline",
    "instrument_checks",
    "measurements_summary",
    "measurements_table",
    "min_effect",
    "render_markdown",
    "verdict",
    "verdict_counts",
]

# A row's verdict is one of three, read from its 95% interval against the threshold on the
# paper's side; a row whose reference (the same test on GRPO) is also reproduced is `not specific`.
# A row whose premise is measured absent on its regime is `premise absent`, whatever its interval says.
REPRODUCED, CONTRADICTED, UNRESOLVED, NOT_SPECIFIC = "reproduced", "contradicted", "unresolved", "not specific"
PREMISE_ABSENT = "premise absent"
VERDICTS = (REPRODUCED, CONTRADICTED, UNRESOLVED, NOT_SPECIFIC, PREMISE_ABSENT)
"""Every verdict a claims-table row can have, in the order headlines count them."""
TESTED = VERDICTS[:4]
"""The verdicts of rows whose premise is not measured absent: the ones the chance count is over."""

EXPECTS = (">", "<", "within")
"""The claimed side: above / below ``than``, or inside ``[than - margin, than + margin]`` (an equivalence)."""

PAPER_NAMES = ("NudgeRL", "3PO", "SAGE", "VIGOR")
"""The papers a claim can come from (``source``); the scorecard has one row per paper."""

AGAINST = ("base", "threshold", "baseline", "grpo", "method")
"""What a row compares with: the base policy, a fixed threshold, a baseline weaker than GRPO, GRPO itself, or
another variant of the method (ablations). The first three need a ``reference`` (the same test on GRPO)."""

NEEDS_REFERENCE = ("base", "threshold", "baseline")

LARGE_EFFECT = 0.2
"""A paper effect is *large* when its relative change ``|to - from| / |from|`` is at least this (20%)."""

EFFECT_FRACTION = 0.25
"""The one minimum-effect rule: a claim whose paper effect is large needs at least this share
(a quarter) of the paper's relative change, taken relative to our comparator's level: see :func:`min_effect`."""

CHANCE_LEVEL = 0.025
"""One-sided error of a row's test: a 95% two-sided interval lies wholly beyond a threshold the true value sits
on with probability 2.5%, so ``CHANCE_LEVEL * rows`` reproduced verdicts are expected from chance alone."""

CLAIMS_COLUMNS = ("id", "claim", "source", "paper", "paper_effect", "ours", "our_effect", "threshold", "interval",
                  "verdict", "verdict_if_premise", "regime", "premise", "reference")
"""The fixed columns of :func:`claims_table`, in order; extra row keys follow."""

MEASUREMENT_COLUMNS = ("id", "measurement", "ours", "threshold", "interval", "verdict", "verdict_if_premise",
                       "regime", "premise")
"""The fixed columns of :func:`measurements_table`."""

CHECK_COLUMNS = ("id", "check", "kind", "value", "passes")
"""The columns of :func:`instrument_checks`."""

CHECK_KINDS = ("construction", "measurement", "identity")
"""Why a row is an instrument check and not a claim: it cannot fail by construction, it measures the instrument
(e.g. how well the clustering recovers labels), or it checks two runs are the same computation."""

_CLAIM_KEYS = frozenset({"id", "claim", "source", "paper", "paper_effect", "ours", "expect", "than", "margin",
                         "against", "reference", "level", "bounds", "regime", "premise"})
_MEASUREMENT_KEYS = frozenset({"id", "measurement", "ours", "expect", "than", "margin", "bounds", "regime", "premise"})


def _premise(where: str, row: Mapping[str, Any],
             regimes: Optional[Mapping[str, Any]]) -> tuple[str, Optional[bool], str]:
    """(regime, present, shown) of a row: its premise's status on its regime (True, False, None) and its text."""
    from rlvr_lib.study.regime_premises import PREMISES, premise_status
    from rlvr_lib.tasks.discovery import REGIMES

    regime = check_choice(f"{where}: regime", row.get("regime"), REGIMES)
    premise = check_choice(f"{where}: premise", row.get("premise"), tuple(PREMISES))
    status = premise_status(regime, premise, regimes)
    present, measured = status["present"], status["measurement"]
    if premise == "none":
        return regime, present, "none"
    if present is None:
        said = "premise not measured" + ("" if measured == "not measured" else f" ({measured})")
    else:
        said = f"{'present' if present else 'absent'}: {measured}"
    return regime, present, f"{premise} -- {said}"


@functools.lru_cache(maxsize=1)
def _claims_table_class():
    """``ClaimsTable``: a ``pandas.DataFrame`` whose display never shortens cells (built on first use)."""
    import pandas as pd

    class ClaimsTable(pd.DataFrame):
        _metadata: list[str] = []

        @property
        def _constructor(self):
            return ClaimsTable

        def __repr__(self) -> str:
            with pd.option_context("display.max_colwidth", None, "display.max_columns", None):
                return super().__repr__()

        def _repr_html_(self):
            with pd.option_context("display.max_colwidth", None, "display.max_columns", None):
                return super()._repr_html_()

    ClaimsTable.__module__ = __name__
    ClaimsTable.__qualname__ = "ClaimsTable"  # found through the module's __getattr__ (pickling)
    return ClaimsTable


def __getattr__(name: str) -> Any:  # ``rlvr_lib.study.claims.tables.ClaimsTable``, e.g. for unpickling
    if name == "ClaimsTable":
        return _claims_table_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _interval(where: str, ours: Any, bounds: Any = None, aggregate: Optional[Callable[..., Mapping[str, Any]]] = None):
    """The interval dict of a row's measurement: an interval dict as is, per-seed values aggregated."""
    if isinstance(ours, Mapping):
        missing = [k for k in ("mean", "ci_low", "ci_high", "n") if k not in ours]
        if missing:
            raise ValueError(f"{where}: ours={dict(ours)!r} is invalid: must be an interval dict with "
                             f"'mean', 'ci_low', 'ci_high', 'n' (and 'method'); missing {missing}")
        return ours
    try:
        return bootstrap_ci(ours, bounds=bounds) if aggregate is None else aggregate(ours)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def verdict(agg: Mapping[str, Any], expect: str, than: float = 0.0, margin: Optional[float] = None) -> str:
    """The verdict of one test: ``"reproduced"``, ``"contradicted"`` or ``"unresolved"``.

    ``">"`` (``"<"`` mirrored): reproduced when ``ci_low > than``, contradicted when ``ci_high < than``.
    ``"within"``: reproduced when the interval lies inside ``(than - margin, than + margin)``, contradicted when
    wholly outside. Unresolved otherwise, and always without an interval.

    Raises:
        ValueError: on an ``expect`` not in :data:`EXPECTS`, a non-finite ``than``, or ``within`` without a positive
            ``margin``.
    """
    check_choice("expect", expect, EXPECTS)
    than = check_range("than", than)
    if expect == "within":
        check(margin is not None, "margin", margin, "a number > 0 for expect='within'")
        margin = check_range("margin", margin, 0, None, lo_open=True)
    if not has_interval(agg):
        return UNRESOLVED
    lo, hi = float(agg["ci_low"]), float(agg["ci_high"])
    if expect == ">":
        return REPRODUCED if lo > than else CONTRADICTED if hi < than else UNRESOLVED
    if expect == "<":
        return REPRODUCED if hi < than else CONTRADICTED if lo > than else UNRESOLVED
    if than - margin < lo and hi < than + margin:
        return REPRODUCED
    return CONTRADICTED if (lo > than + margin or hi < than - margin) else UNRESOLVED


def _paper_effect(where: str, effect: Any) -> tuple[str, Optional[tuple[str, float, float]]]:
    """(shown text, (metric, from, to) or None) of a row's ``paper_effect``."""
    if isinstance(effect, str) and effect:
        return effect, None
    ok = (isinstance(effect, (tuple, list)) and len(effect) == 3 and isinstance(effect[0], str)
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in effect[1:]))
    check(ok, f"{where}: paper_effect", effect,
          "a non-empty str (the paper gives no number) or (metric, from, to) with finite from and to")
    metric, a, b = effect[0], float(effect[1]), float(effect[2])
    rel = f" ({(b - a) / abs(a):+.0%})" if a != 0 else ""
    return f"{metric} {a:g} -> {b:g}{rel}", (metric, a, b)


def min_effect(paper_from: float, paper_to: float, level: float) -> Optional[float]:
    """The minimum effect a claim must show, from the paper's effect.

    ``rel = (paper_to - paper_from) / |paper_from|``; when ``|rel| >= LARGE_EFFECT`` the minimum is
    ``EFFECT_FRACTION * rel * |level|`` (``level``: our value of the paper's ``from`` side), else None.

    Raises:
        ValueError: when ``paper_from`` is 0 or a value is not finite.
    """
    for name, v in (("paper_from", paper_from), ("paper_to", paper_to), ("level", level)):
        check_range(name, v)
    check(paper_from != 0, "paper_from", paper_from, "non-zero (the rule uses the paper's relative change)")
    rel = (paper_to - paper_from) / abs(paper_from)
    if abs(rel) < LARGE_EFFECT:
        return None
    return EFFECT_FRACTION * rel * abs(level)


def _threshold(where: str, expect: str, than: float, effect: Optional[tuple], level: Any) -> tuple[float, str]:
    """(threshold, how it was set) of a claim row: ``than`` or, when stricter, the minimum effect."""
    if effect is None or expect == "within":
        return than, ""
    metric, a, b = effect
    sign = 1 if b > a else -1 if b < a else 0
    check(sign == (1 if expect == ">" else -1), f"{where}: expect", expect,
          f"the side of the paper's change {a:g} -> {b:g} ('>' for a rise, '<' for a fall)")
    if a == 0 or abs(b - a) / abs(a) < LARGE_EFFECT:  # no relative change, or a small one: 0 stays
        return than, ""
    check(level is not None and isinstance(level, (int, float)) and not isinstance(level, bool)
          and math.isfinite(level), f"{where}: level", level,
          f"our finite value of the paper's 'from' side: the paper's effect {a:g} -> {b:g} is large "
          f"(>= {LARGE_EFFECT:.0%} relative), so the row's threshold is a minimum effect")
    m = min_effect(a, b, float(level))
    if m is None:
        return than, ""
    m = than + m  # the minimum effect is measured from the claim's own threshold (usually 0)
    stricter = m > than if expect == ">" else m < than
    return (m, "min effect") if stricter else (than, "")


def _check_rows(kind: str, rows: Sequence[Mapping[str, Any]], ids_key: str = "id",
                aggregate: Optional[Callable[..., Mapping[str, Any]]] = None) -> None:
    """Ids unique; no measurement tested by two one-sided rows of opposite sides (use one ``"within"`` row)."""
    seen: dict[str, int] = {}
    sides: dict[tuple, tuple[int, str]] = {}
    for i, row in enumerate(rows):
        rid = row.get(ids_key)
        check(isinstance(rid, str) and NAME_RE.match(rid), f"{kind} row {i}: id", rid,
              "a file-name-safe str naming the claim (letters, digits and . _ + = @ -)")
        check(rid not in seen, f"{kind} row {i}: id", rid, f"unique in the table (row {seen.get(rid)} has it)")
        seen[rid] = i
        ours, expect = row.get("ours"), row.get("expect")
        if ours is not None and not isinstance(ours, Mapping) and expect in (">", "<"):
            # per-seed values: compare the intervals the table will test (a bad row fails later, with its field)
            try:
                ours = _interval(f"{kind} row {i}", ours, row.get("bounds"), aggregate)
            except ValueError:
                ours = None
        if isinstance(ours, Mapping) and expect in (">", "<") and all(k in ours for k in ("mean", "ci_low", "ci_high")):
            key = (float(ours["mean"]), float(ours["ci_low"]), float(ours["ci_high"]))
            if key[1] == key[2]:
                # A zero-width interval (e.g. every value 0 on a small sample) matches other measurements by
                # coincidence; only the same measurement object counts as "the same measurement" then.
                key = ("object", id(ours))
            other = sides.get(key)
            if other is not None and other[1] != expect:
                raise ValueError(
                    f"{kind} row {i}: expect={expect!r} is invalid: row {other[0]} ({rows[other[0]].get(ids_key)!r}) "
                    f"tests the same measurement with expect={other[1]!r}, so the two rows are one-sided halves of "
                    "a two-sided claim; must be one row with expect='within' and a margin")
            sides.setdefault(key, (i, expect))


def _side_text(expect: str, than: float, margin: Optional[float], fmt: str) -> str:
    if expect == "within":
        return f"within {than:{fmt}} +- {margin:{fmt}}"
    return f"{expect} {than:{fmt}}"


def _test(where: str, row: Mapping[str, Any]) -> tuple[str, float, Optional[float]]:
    expect = check_choice(f"{where}: expect", row.get("expect"), EXPECTS)
    than = check_range(f"{where}: than", row.get("than", 0.0))
    margin = row.get("margin")
    if expect == "within":
        check(margin is not None and isinstance(margin, (int, float)) and not isinstance(margin, bool)
              and math.isfinite(margin) and margin > 0, f"{where}: margin", margin,
              "a number > 0 stated in the row (expect='within')")
    else:
        check(margin is None, f"{where}: margin", margin, "absent unless expect='within'")
    return expect, than, margin


def claims_table(
    rows: Sequence[Mapping[str, Any]],
    fmt: str = ".3f",
    *,
    aggregate: Optional[Callable[..., Mapping[str, Any]]] = None,
    regimes: Optional[Mapping[str, Any]] = None,
):
    """Builds a notebook's claims table: each paper claim's verdict at our scale.

    Each row: ``id``, ``claim``, ``source`` (one of :data:`PAPER_NAMES`), ``paper``, ``paper_effect``
    (``(metric, from, to)`` or a str), ``ours`` (an interval dict, per-seed values or a number), ``expect``
    (``">"`` / ``"<"`` with ``than``, or ``"within"`` with ``margin``), ``level`` (required for a large paper effect:
    :func:`min_effect`), ``against`` (one of :data:`AGAINST`) with ``reference`` where required, optional
    ``bounds``, and ``regime`` and ``premise``; other keys become extra columns. Field rules: docs/study/claims.md.

    Returns:
        A ``ClaimsTable`` with :data:`CLAIMS_COLUMNS`, then the extra columns; ``verdict`` one of :data:`VERDICTS`.

    Raises:
        ValueError: naming the row, the field, its value and what is allowed.
    """
    _check_rows("claims_table", rows, aggregate=aggregate)
    if regimes is None:  # read once for the table, not once per row
        from rlvr_lib.study.regime_premises import load_regimes

        regimes = load_regimes()
    out = []
    for i, row in enumerate(rows):
        where = f"claims_table row {i}"
        check("holds" not in row, f"{where}: holds", row.get("holds"),
              "absent: a claim's verdict comes from its interval; a check that cannot fail or that measures the "
              "instrument goes to instrument_checks")
        missing = [k for k in ("claim", "source", "paper", "paper_effect", "ours", "expect", "against") if k not in row]
        check(not missing, f"{where}: fields", sorted(row), f"a mapping with {missing} as well")
        regime, present, premise = _premise(f"{where} ({row.get('id')!r})", row, regimes)
        check_choice(f"{where}: source", row["source"], PAPER_NAMES)
        against = check_choice(f"{where}: against", row["against"], AGAINST)
        expect, than, margin = _test(where, row)
        shown_effect, effect = _paper_effect(where, row["paper_effect"])
        threshold, how = _threshold(where, expect, than, effect, row.get("level"))
        agg = _interval(where, row["ours"], row.get("bounds"), aggregate)
        result = verdict(agg, expect, threshold, margin)
        reference = row.get("reference")
        if against in NEEDS_REFERENCE:
            check(reference is not None, f"{where}: reference", reference,
                  f"the same test on GRPO (an interval dict) or a str saying why there is none (against={against!r})")
        if isinstance(reference, Mapping):
            ref = _interval(f"{where}: reference", reference)
            ref_verdict = verdict(ref, expect, threshold, margin)
            reference_text = f"GRPO {format_ci(ref, fmt)}: {ref_verdict}"
            if result == REPRODUCED and ref_verdict == REPRODUCED:
                result = NOT_SPECIFIC  # GRPO passes the same test: the row says nothing about the method
        else:
            check(reference is None or isinstance(reference, str), f"{where}: reference", reference,
                  "an interval dict or a str")
            reference_text = reference or "-"
        level = row.get("level")
        our_effect = (f"{agg['mean'] / abs(level):+.0%} of {abs(level):{fmt}}"
                      if isinstance(level, (int, float)) and not isinstance(level, bool) and level else "-")
        extra = {k: v for k, v in row.items() if k not in _CLAIM_KEYS}
        out.append({"id": row["id"], "claim": row["claim"], "source": row["source"], "paper": row["paper"],
                    "paper_effect": shown_effect, "ours": format_ci(agg, fmt), "our_effect": our_effect,
                    "threshold": _side_text(expect, threshold, margin, fmt) + (f" ({how})" if how else ""),
                    "interval": agg.get("method", "unspecified"),
                    "verdict": PREMISE_ABSENT if present is False else result, "verdict_if_premise": result,
                    "regime": regime, "premise": premise, "reference": reference_text, **extra})
    cls = _claims_table_class()
    return cls(out, columns=None if out else list(CLAIMS_COLUMNS))


def measurements_table(
    rows: Sequence[Mapping[str, Any]],
    fmt: str = ".3f",
    *,
    aggregate: Optional[Callable[..., Mapping[str, Any]]] = None,
    regimes: Optional[Mapping[str, Any]] = None,
):
    """Additional measurements: tests no paper states, with verdicts but never counted.

    Rows as :func:`claims_table`'s with ``measurement`` instead of ``claim`` and no paper fields; ``regime`` and
    ``premise`` required. Returns a ``ClaimsTable`` with :data:`MEASUREMENT_COLUMNS` then the extra keys.
    """
    _check_rows("measurements_table", rows, aggregate=aggregate)
    if regimes is None:  # read once for the table, not once per row
        from rlvr_lib.study.regime_premises import load_regimes

        regimes = load_regimes()
    out = []
    for i, row in enumerate(rows):
        where = f"measurements_table row {i}"
        missing = [k for k in ("measurement", "ours", "expect") if k not in row]
        check(not missing, f"{where}: fields", sorted(row), f"a mapping with {missing} as well")
        regime, present, premise = _premise(f"{where} ({row.get('id')!r})", row, regimes)
        expect, than, margin = _test(where, row)
        agg = _interval(where, row["ours"], row.get("bounds"), aggregate)
        result = verdict(agg, expect, than, margin)
        extra = {k: v for k, v in row.items() if k not in _MEASUREMENT_KEYS}
        out.append({"id": row["id"], "measurement": row["measurement"], "ours": format_ci(agg, fmt),
                    "threshold": _side_text(expect, than, margin, fmt), "interval": agg.get("method", "unspecified"),
                    "verdict": PREMISE_ABSENT if present is False else result, "verdict_if_premise": result,
                    "regime": regime, "premise": premise, **extra})
    return _claims_table_class()(out, columns=None if out else list(MEASUREMENT_COLUMNS))


def instrument_checks(rows: Sequence[Mapping[str, Any]]):
    """Instrument checks (rows that cannot fail by construction), never counted among paper claims.

    Each row: ``id``, ``check``, ``kind`` (one of :data:`CHECK_KINDS`), ``value`` and ``passes`` (bool).
    """
    out = []
    seen = set()
    for i, row in enumerate(rows):
        where = f"instrument_checks row {i}"
        missing = [k for k in CHECK_COLUMNS if k not in row]
        check(not missing, f"{where}: fields", sorted(row), f"a mapping with {missing} as well")
        check(row["id"] not in seen, f"{where}: id", row["id"], "unique in the table")
        seen.add(row["id"])
        check_choice(f"{where}: kind", row["kind"], CHECK_KINDS)
        check(isinstance(row["passes"], bool) or type(row["passes"]).__name__ == "bool_", f"{where}: passes",
              row["passes"], "a bool")
        value = row["value"]
        shown = format_ci(value) if isinstance(value, Mapping) else f"{value:.3f}" if isinstance(value, float) else str(value)
        out.append({"id": row["id"], "check": row["check"], "kind": row["kind"], "value": shown,
                    "passes": bool(row["passes"])})
    return _claims_table_class()(out, columns=list(CHECK_COLUMNS))


def verdict_counts(table) -> dict[str, int]:
    """How many rows of a claims table have each verdict, in :data:`VERDICTS` order (zeros included)."""
    counts = {v: 0 for v in VERDICTS}
    for v in table["verdict"]:
        counts[check_choice("verdict", v, VERDICTS)] += 1
    return counts


def claims_headline(counts: Mapping[str, int]) -> str:
    """The count :func:`claims_summary` opens with, e.g. ``"3 reproduced, 1 contradicted, 5 unresolved, 2 not
    specific, 4 premise absent of 15 claims"`` (the four-verdict form without a :data:`PREMISE_ABSENT` key).
    """
    shown = VERDICTS if PREMISE_ABSENT in counts else TESTED
    n = sum(int(counts.get(v, 0)) for v in shown)
    return ", ".join(f"{int(counts.get(v, 0))} {v}" for v in shown) + f" of {n} claims"


_CLAIMS_HEADLINE = re.compile(r"\*\*(\d+) reproduced, (\d+) contradicted, (\d+) unresolved, (\d+) not specific"
                              r"(?:, (\d+) premise absent)? of (\d+) claims\*\*")
"""A headline of :func:`claims_summary`: five verdicts, or the four of one written before premises were checked."""
_SCORECARD = re.compile(r"<!-- claims-scorecard (\{.*?\}) -->")


def find_claims_headline(text: str) -> str | None:
    """The claims counts of every :func:`claims_summary` in ``text`` (e.g. a notebook's stored outputs), summed,
    as :func:`claims_headline` writes them, naming the number of tables when there are several; None if none."""
    found = _CLAIMS_HEADLINE.findall(text)
    if not found:
        return None
    counts = {v: sum(int(f[j] or 0) for f in found) for j, v in enumerate(VERDICTS)}
    if not any(f[4] for f in found):  # every headline from before premises were checked
        del counts[PREMISE_ABSENT]
    headline = claims_headline(counts)
    return headline if len(found) == 1 else f"{headline}, over {len(found)} claims tables"


def find_claims_counts(text: str) -> dict[str, dict[str, int]]:
    """Per paper, the verdict counts of every :func:`claims_summary` in ``text``, summed (hidden comments)."""
    totals: dict[str, dict[str, int]] = {}
    for blob in _SCORECARD.findall(text):
        for paper, counts in json.loads(blob).items():
            mine = totals.setdefault(paper, {v: 0 for v in VERDICTS})
            for v in VERDICTS:
                mine[v] += int(counts.get(v, 0))
    return totals


def notebook_outputs(path) -> str:
    """The text and markdown outputs an executed notebook (``path``) stores, joined in cell order."""
    cells = json.loads(Path(path).read_text())["cells"]
    outputs = [o for c in cells for o in c.get("outputs", [])]
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", "")) for o in outputs)


OPENING_TAG = "claims-opening"
"""The tag of the cell :func:`opening_summary`'s text goes in, at the top of an executed notebook."""


def opening_summary(outputs: str) -> str | None:
    """Each claims table's headline and :func:`claims_reading`, from a notebook's ``outputs``; None without one."""
    parts = []
    for block in outputs.split("\n"):
        if _CLAIMS_HEADLINE.match(block) or block.startswith(("**Reading.**", "**What the testbed cannot say.**")):
            parts.append(block)
    if not any(_CLAIMS_HEADLINE.match(p) for p in parts):
        return None
    return "\n\n".join(["## At a glance", "*Copied by `make reproduce` from this notebook's results below, where "
                          "each claim is shown with its interval, threshold and the paper's effect.*", *parts])


_VERDICT_WORDS = {
    REPRODUCED: "the whole 95% interval lies on the paper's side of the threshold",
    CONTRADICTED: "the whole interval lies on the other side",
    UNRESOLVED: "the interval straddles or touches the threshold (or the band's edge)",
    NOT_SPECIFIC: "reproduced, but GRPO passes the same test (the `reference` column)",
    PREMISE_ABSENT: "the premise the row needs is measured absent on its regime (the `premise` column): not tested "
                    "there; its interval and the verdict it would have had are kept (`verdict_if_premise`)",
}


def _regimes_line(table) -> str:
    """Which regime the rows are measured on and which premise they need, counted."""
    parts = []
    for regime in dict.fromkeys(table["regime"]):
        mine = table[table["regime"] == regime]
        needs = {p.split(" -- ")[0]: 0 for p in mine["premise"]}
        for p in mine["premise"]:
            needs[p.split(" -- ")[0]] += 1
        parts.append(f"{len(mine)} on the {regime} regime ("
                     + ", ".join(f"{n} needing {'no premise' if p == 'none' else f'the {p} premise'}"
                                 for p, n in needs.items()) + ")")
    return "; ".join(parts)


def claims_summary(table) -> str:
    """A markdown summary of a claims table, for the top of a notebook's results.

    The headline, a hidden comment with the counts per paper, the chance count, the rows' regimes and premises, then
    one bullet per claim (docs/study/claims.md).
    """
    counts = verdict_counts(table)
    per_paper: dict[str, dict[str, int]] = {}
    for _, row in table.iterrows():
        per_paper.setdefault(row["source"], {v: 0 for v in VERDICTS})[row["verdict"]] += 1
    n = len(table)
    tested = n - counts[PREMISE_ABSENT]
    lines = [f"**{claims_headline(counts)}** (chance alone, every effect at its threshold, would give "
             f"{CHANCE_LEVEL * tested:.1f} `reproduced` at the one-sided {CHANCE_LEVEL:.1%} level"
             + (f" over the {tested} rows whose premise is not absent" if counts[PREMISE_ABSENT] else "") + ").",
             f"<!-- claims-scorecard {json.dumps(per_paper, sort_keys=True)} -->", ""]
    if n:
        lines += [f"Regimes: {_regimes_line(table)}.", ""]
    lines += [f"- `{v}`: {words}" for v, words in _VERDICT_WORDS.items()] + [""]
    for _, row in table.iterrows():
        ref = f"; reference: {row['reference']}" if row["reference"] != "-" else ""
        absent = (f" (its interval alone would read `{row['verdict_if_premise']}`)"
                  if row["verdict"] == PREMISE_ABSENT else "")
        lines.append(f"- **{row['verdict']}**{absent}: {row['claim']} ({row['source']}) -- ours {row['ours']}, "
                     f"threshold {row['threshold']} ({row['interval']}); paper: {row['paper_effect']}{ref}; "
                     f"regime {row['regime']}, premise {row['premise']}")
    return "\n".join(lines)


TESTBED_LIMITS = ("The testbed is a 0.62M-parameter policy pretrained here on procedural multiplication, whose "
                  "three named strategies (direct, split, round) stand in for reasoning modes, trained for 200 RL "
                  "steps of 8 prompts each on 2 CPU cores.")
"""What every notebook's reading says of the testbed before its own limits (README, "The testbed")."""


def claims_reading(table, limits: str) -> str:
    """A short reading of a claims table in words, built from the table alone (docs/study/claims.md)."""
    check(isinstance(limits, str) and limits.strip(), "limits", limits,
          "the notebook's own words on what the testbed cannot say (Registry.limits)")
    groups = {v: [row for _, row in table.iterrows() if row["verdict"] == v] for v in VERDICTS}
    counts = ", ".join(f"{len(groups[v])} {v}" for v in VERDICTS)
    lines = [f"**Reading.** Of the {len(table)} claims tested here: {counts}."]
    if len(table):
        lines.append(f"Regimes: {_regimes_line(table)}.")
    if groups[PREMISE_ABSENT]:
        measured = list(dict.fromkeys(row["premise"] for row in groups[PREMISE_ABSENT]))
        lines.append("Premise absent (the row needs a premise measured absent on its regime, "
                     + "; ".join(measured) + ", so the testbed does not test it there): "
                     + "; ".join(f"{row['claim']} ({row['source']}; its interval {row['ours']} alone would read "
                                 f"{row['verdict_if_premise']})" for row in groups[PREMISE_ABSENT]) + ".")
    if groups[CONTRADICTED]:
        lines.append("Where the testbed disagrees with the paper (contradicted): "
                     + "; ".join(f"{row['claim']} ({row['source']}): ours {row['ours']}, the paper's "
                                 f"{row['paper_effect']}" for row in groups[CONTRADICTED]) + ".")
    if groups[REPRODUCED]:
        lines.append("Reproduced: " + "; ".join(f"{row['claim']} ({row['source']})" for row in groups[REPRODUCED])
                     + ".")
    if groups[NOT_SPECIFIC]:
        lines.append("Reproduced, but GRPO passes the same test, so it says nothing of the method: "
                     + "; ".join(row["claim"] for row in groups[NOT_SPECIFIC]) + ".")
    if groups[UNRESOLVED]:
        lines.append("Unresolved (the interval straddles the threshold: neither shown nor refuted at this "
                     "precision): " + "; ".join(row["claim"] for row in groups[UNRESOLVED]) + ".")
    return "\n\n".join([" ".join(lines), f"**What the testbed cannot say.** {TESTBED_LIMITS} {limits.strip()}"])


def measurements_summary(table) -> str:
    """A markdown summary of :func:`measurements_table` (not counted among paper claims)."""
    counts = verdict_counts(table)
    head = ", ".join(f"{counts[v]} {v}" for v in (*VERDICTS[:3], PREMISE_ABSENT))
    lines = [f"Additional measurements (no paper states these; not counted among claims): {head} of {len(table)}.", ""]
    lines += [f"- {row['verdict']}"
              + (f" (its interval alone: {row['verdict_if_premise']})" if row["verdict"] == PREMISE_ABSENT else "")
              + f": {row['measurement']} -- ours {row['ours']}, threshold {row['threshold']}; regime "
                f"{row['regime']}, premise {row['premise']}"
              for _, row in table.iterrows()]
    return "\n".join(lines)


_CLAIMS_HEAD = ("", "id", "claim", "source", "paper")
"""The first header cells of a stored claims table's HTML (the index column, then :data:`CLAIMS_COLUMNS`)."""
_NUMBER = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|nan"
_OURS = re.compile(rf"({_NUMBER}) (?:\[({_NUMBER}), ({_NUMBER})\]|\(n=\d+\))")
_THRESHOLD = re.compile(rf"(>|<|within) ({_NUMBER})(?: \+- ({_NUMBER}))?(?: \([^()]*\))?")


def html_tables(html: str) -> list[list[list[str]]]:
    """The tables of an HTML fragment (a pandas ``_repr_html_``), each as its rows of cell texts (entities decoded)."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.tables: list[list[list[str]]] = []
            self.row: Optional[list[str]] = None
            self.cell: Optional[list[str]] = None

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.tables.append([])
            elif tag == "tr" and self.tables:
                self.row = []
            elif tag in ("td", "th") and self.row is not None:
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self.cell is not None and self.row is not None:
                self.row.append("".join(self.cell).strip())
                self.cell = None
            elif tag == "tr" and self.row is not None:
                self.tables[-1].append(self.row)
                self.row = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    parser = Tables()
    parser.feed(html)
    parser.close()
    return parser.tables


def _float(text: Optional[str]) -> float:
    return math.nan if text is None else float(text)


def claims_rows(notebook_path, notebook: Optional[str] = None) -> list[dict[str, Any]]:
    """The rows of every claims table an executed notebook stores, as numbers (what a claims forest plot draws).

    Reads the HTML display of each :func:`claims_table` in the notebook's outputs (a table whose columns start as
    :data:`CLAIMS_COLUMNS`; measurement and instrument tables are skipped) and parses its ``ours`` (``"mean [low,
    high]"``, or ``"mean (n=1)"`` without an interval) and ``threshold`` (``"> t"``, ``"< t"`` or ``"within t +-
    m"``, with an optional note such as ``"(min effect)"``) cells. The numbers are the shown ones, rounded as the
    table rounds them (3 decimals). ``notebook_path`` may also be a claims table itself (a notebook drawing its own
    table before it is stored): its HTML is read the same way.

    Args:
        notebook_path: An executed ``.ipynb`` file, or a :func:`claims_table`.
        notebook: The rows' ``notebook``; default the file's stem (required for a table).

    Returns:
        One dict per row in table order: ``notebook`` (the file's stem), ``id``, ``claim``, ``paper`` (the paper's
        name, the table's ``source``: one of :data:`PAPER_NAMES`), ``table`` (the paper's table or figure, its
        ``paper`` column), ``our_effect`` (the mean), ``low`` and ``high`` (NaN without an interval),
        ``threshold``, ``expect`` (one of :data:`EXPECTS`), ``margin`` (None unless ``"within"``), ``verdict`` and
        ``verdict_if_premise``.

    Raises:
        ValueError: when the file is not a notebook, a stored table is cut short (pandas' ``...`` rows), or a cell
            does not parse, naming the notebook, the row and the cell.
    """
    if hasattr(notebook_path, "to_html") and hasattr(notebook_path, "columns"):
        check(isinstance(notebook, str) and notebook, "notebook", notebook, "a name for the rows of a claims table")
        path, htmls = Path(f"{notebook}.ipynb"), [notebook_path.to_html()]
    else:
        path = Path(notebook_path)
        try:
            cells = json.loads(path.read_text())["cells"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"notebook_path={str(path)!r} is invalid: must be an executed .ipynb file or a claims "
                             f"table ({e})") from None
        htmls = [o.get("data", {}).get("text/html", "") for cell in cells for o in cell.get("outputs", [])]
    name = path.stem if notebook is None else notebook
    out: list[dict[str, Any]] = []
    for html in htmls:
        html = "".join(html) if isinstance(html, list) else html
        if "<th>claim</th>" not in html:
            continue
        for table in html_tables(html):
            if not table or tuple(table[0][:len(_CLAIMS_HEAD)]) != _CLAIMS_HEAD:
                continue
            head = table[0]
            for cells_ in table[1:]:
                where = f"{path.name}: claims table row {cells_[:2]!r}"
                check(len(cells_) == len(head) and "..." not in cells_[1:3], where, cells_,
                      f"a full row of the {len(head)} columns {head[1:]} (pandas cut the stored table short)")
                row = dict(zip(head, cells_))
                ours = _OURS.fullmatch(row["ours"])
                check(ours is not None, f"{where}: ours", row["ours"], "'mean [low, high]' or 'mean (n=N)'")
                test = _THRESHOLD.fullmatch(row["threshold"])
                check(test is not None, f"{where}: threshold", row["threshold"],
                      "'> t', '< t' or 'within t +- m', optionally followed by a note in parentheses")
                check(row["verdict"] in VERDICTS, f"{where}: verdict", row["verdict"], f"one of {VERDICTS}")
                out.append({"notebook": name, "id": row["id"], "claim": row["claim"],
                            "paper": row["source"], "table": row["paper"], "our_effect": float(ours[1]),
                            "low": _float(ours[2]), "high": _float(ours[3]), "threshold": float(test[2]),
                            "expect": test[1], "margin": None if test[3] is None else float(test[3]),
                            "verdict": row["verdict"], "verdict_if_premise": row.get("verdict_if_premise")})
    return out


def render_markdown(df) -> str:
    """Renders a DataFrame (e.g. a claims table) as a GitHub markdown table (via ``tabulate``)."""
    return df.to_markdown(index=False)
