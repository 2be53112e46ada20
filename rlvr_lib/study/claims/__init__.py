"""Pre-registered claim rows, one module per notebook (``claims/nbNN_*.py``), and their provenance.

* :class:`Registry` -- a notebook's rows (:class:`Claim`, :class:`Measurement`, :class:`Check`): the claim in
  words, the paper and its effect, the side and threshold (or equivalence margin), what it compares with. The
  notebook supplies only measurements keyed by row id; :meth:`Registry.claim_rows` refuses an undeclared id and
  a declared id left unmeasured.
* :func:`provenance` -- stored in every run record (``record.extra["claims"]``): the claims module's commit and
  a fingerprint of each row; :meth:`Registry.changed_rows` lists rows added, changed, removed or re-tagged since
  the notebook's first full-profile record (older records: the rows' own ``changed`` notes).
* Regimes and premises -- every claim and measurement row names the regime it is measured on
  (`rlvr_lib.tasks.discovery.REGIMES`) and the premise it needs (`rlvr_lib.study.regime_premises.PREMISES`:
  discovery, retention or none); a row whose premise is measured absent reads ``premise absent``.

The rule that assigns each row its premise, and how rows registered before the tags are listed:
docs/study/claims.md.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from rlvr_lib.study.claims.tables import (AGAINST, CHECK_KINDS, EXPECTS, PAPER_NAMES, claims_reading, claims_table,
                                          instrument_checks, measurements_table)
from rlvr_lib.study import papers
from rlvr_lib.study.runs import load_runs
from ...validation import check, check_choice

__all__ = ["Check", "Claim", "Measurement", "REGISTRIES", "Registry", "TAGGED", "changed_summary", "provenance",
           "record_extra", "registry", "registry_for"]

_PKG = Path(__file__).resolve().parent

REGISTRIES = {nb.experiment: nb.claims for nb in papers.NOTEBOOKS}
"""Which module holds the rows of the notebook that owns an experiment (its runs are that notebook's records):
experiment prefix (without _quick / _full) -> claims module, from the manifest (`rlvr_lib.study.papers`)."""


TAGGED = "issue 55: regime and premise tags; verdict rule premise-absent"
"""Why every row registered before regime and premise tags existed shows as ``tagged`` after its notebook's first
full-profile record."""

_NOT_STATED = ("changed", "regime", "premise")
"""Fields a row's fingerprint leaves out: the note on its history and its tags (:meth:`Claim.tags`), which
:meth:`Registry.changed_rows` compares on their own."""


def _fingerprint(obj: Any) -> str:
    fields = {k: v for k, v in dataclasses.asdict(obj).items() if k not in _NOT_STATED}  # what the row states
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=list).encode()).hexdigest()[:16]


def _check_tags(kind: str, rid: str, regime: Any, premise: Any) -> None:
    """A row's ``regime`` and ``premise`` : both required, each one of its allowed values."""
    from rlvr_lib.study.regime_premises import PREMISES
    from rlvr_lib.tasks.discovery import REGIMES

    check_choice(f"{kind} {rid!r}: regime", regime, REGIMES)
    check_choice(f"{kind} {rid!r}: premise", premise, tuple(PREMISES))


@dataclasses.dataclass(frozen=True)
class Claim:
    """One paper claim (a row of :func:`rlvr_lib.study.claims.tables.claims_table`).

    Attributes:
        id: Unique in its notebook.
        text: The claim in words; ``{name}`` fields are filled from the notebook's context (e.g. ``{n}``).
        source: The paper (:data:`~rlvr_lib.study.claims.tables.PAPER_NAMES`).
        paper: Where the paper states it.
        paper_effect: ``(metric, from, to)`` from the paper's table, or a str when it gives no number.
        expect: ``">"``, ``"<"`` or ``"within"``; ``than`` the threshold, ``margin`` the equivalence margin.
        against: What the row compares with (:data:`~rlvr_lib.study.claims.tables.AGAINST`).
        changed: Why the row differs from the one the notebook stated before its first full-profile runs
            (None: unchanged; a note starting "added" for a row new since). Shown by
            :meth:`Registry.changed_rows` for records without fingerprints.
        table: Which of the notebook's claims tables the row belongs to (``"main"`` unless it has several).
        regime: The regime the row is measured on (`rlvr_lib.tasks.discovery.REGIMES`); required.
        premise: The premise the row needs (`rlvr_lib.study.regime_premises.PREMISES`, by the rule of this package's
            docstring); required. Neither is part of :meth:`fingerprint` (:meth:`tags`).
    """

    id: str
    text: str
    source: str
    paper: str
    paper_effect: Union[str, tuple]
    expect: str
    against: str
    than: float = 0.0
    margin: Optional[float] = None
    changed: Optional[str] = None
    table: str = "main"
    regime: Optional[str] = None
    premise: Optional[str] = None

    def __post_init__(self):
        check_choice(f"Claim {self.id!r}: source", self.source, PAPER_NAMES)
        check_choice(f"Claim {self.id!r}: expect", self.expect, EXPECTS)
        check_choice(f"Claim {self.id!r}: against", self.against, AGAINST)
        _check_tags("Claim", self.id, self.regime, self.premise)

    def fingerprint(self) -> str:
        return _fingerprint(self)

    def tags(self) -> str:
        """``"<regime>/<premise>"``: what :meth:`Registry.changed_rows` compares apart from the fingerprint."""
        return f"{self.regime}/{self.premise}"


@dataclasses.dataclass(frozen=True)
class Measurement:
    """A test no paper states (the repository's own reading): a row of ``measurements_table``; its ``regime`` and
    ``premise`` are required, as a :class:`Claim`'s."""

    id: str
    text: str
    expect: str
    than: float = 0.0
    margin: Optional[float] = None
    changed: Optional[str] = None
    regime: Optional[str] = None
    premise: Optional[str] = None

    def __post_init__(self):
        check_choice(f"Measurement {self.id!r}: expect", self.expect, EXPECTS)
        _check_tags("Measurement", self.id, self.regime, self.premise)

    def fingerprint(self) -> str:
        return _fingerprint(self)

    def tags(self) -> str:
        return f"{self.regime}/{self.premise}"


@dataclasses.dataclass(frozen=True)
class Check:
    """An instrument check (cannot fail by construction, measures the instrument, or an identity)."""

    id: str
    text: str
    kind: str
    changed: Optional[str] = None

    def __post_init__(self):
        check_choice(f"Check {self.id!r}: kind", self.kind, CHECK_KINDS)

    def fingerprint(self) -> str:
        return _fingerprint(self)


def _fill(text: str, context: Mapping[str, Any], rid: str) -> str:
    try:
        return text.format(**context)
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"row {rid!r}: text={text!r} is invalid: must have its fields in the context "
                         f"{sorted(context)} ({e!r})") from None


def _complete(kind: str, declared: Sequence, measured: Mapping[str, Any]) -> None:
    ids = [d.id for d in declared]
    unknown, missing = sorted(set(measured) - set(ids)), [i for i in ids if i not in measured]
    check(not unknown and not missing, f"{kind} measured ids", sorted(measured),
          f"exactly the registered ids {ids} (unknown: {unknown}, unmeasured: {missing})")


@dataclasses.dataclass(frozen=True)
class Registry:
    """A notebook's pre-registered rows: claims, additional measurements and instrument checks.

    ``removed``: ``(row as it was, why)`` for each row the notebook stated before its first full-profile runs
    and no longer has (listed by :meth:`changed_rows` for records without fingerprints). ``limits``: what the
    testbed cannot say about the notebook's paper (scale, model, data), in words, for
    `rlvr_lib.study.claims.tables.claims_reading`; not part of any row's fingerprint. ``tagged``: why rows' regime
    and premise differ from those the first full-profile record stored (:data:`TAGGED` for rows registered before
    the tags).
    """

    notebook: str
    experiment: str
    claims: tuple = ()
    measurements: tuple = ()
    checks: tuple = ()
    removed: tuple = ()
    module: str = ""
    limits: str = ""
    tagged: str = ""

    def __post_init__(self):
        ids = [r.id for r in (*self.claims, *self.measurements, *self.checks)]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        check(not dup, f"Registry {self.notebook!r}: ids", dup, "unique across claims, measurements and checks")

    def claim_rows(self, measured: Mapping[str, Any], table: str = "main", **context) -> list[dict]:
        """Claims-table rows: each registered claim of ``table`` with its measurement.

        Args:
            measured: Per claim id, an interval dict (``ours``) or a dict with ``ours`` and any of
                ``reference``, ``level``, ``bounds``, ``note``; ``None`` for a row the profile does not run
                (the quick profile's smaller sweeps): the row is left out, never its id.
            table: Which claims table (the claims' ``table``).
            context: Values for the claims' ``{fields}``.
        """
        claims = [c for c in self.claims if c.table == table]
        check(claims, f"{self.notebook} claims: table", table,
              f"one of {sorted({c.table for c in self.claims})}")
        _complete(f"{self.notebook} claims", claims, measured)
        rows = []
        for c in claims:
            m = measured[c.id]
            if m is None:  # not run in this profile
                continue
            m = m if isinstance(m, Mapping) and "ours" in m else {"ours": m}
            row = dict(id=c.id, claim=_fill(c.text, context, c.id), source=c.source, paper=c.paper,
                       paper_effect=c.paper_effect, expect=c.expect, than=c.than, against=c.against,
                       regime=c.regime, premise=c.premise, **m)
            if c.margin is not None:
                row["margin"] = c.margin
            rows.append(row)
        return rows

    def measurement_rows(self, measured: Mapping[str, Any], **context) -> list[dict]:
        """Rows of ``measurements_table``, as :meth:`claim_rows` (``None``: a row the profile does not run)."""
        _complete(f"{self.notebook} measurements", self.measurements, measured)
        rows = []
        for c in self.measurements:
            m = measured[c.id]
            if m is None:  # not run in this profile (e.g. a pair that does not compose with the selected arm)
                continue
            m = m if isinstance(m, Mapping) and "ours" in m else {"ours": m}
            row = dict(id=c.id, measurement=_fill(c.text, context, c.id), expect=c.expect, than=c.than,
                       regime=c.regime, premise=c.premise, **m)
            if c.margin is not None:
                row["margin"] = c.margin
            rows.append(row)
        return rows

    def check_rows(self, measured: Mapping[str, tuple], **context) -> list[dict]:
        """Rows of ``instrument_checks``: per check id, ``(value, passes)``."""
        _complete(f"{self.notebook} checks", self.checks, measured)
        return [dict(id=c.id, check=_fill(c.text, context, c.id), kind=c.kind, value=measured[c.id][0],
                     passes=bool(measured[c.id][1])) for c in self.checks]

    def claims_table(self, measured, fmt: str = ".3f", table: str = "main", regimes=None, **context):
        """`rlvr_lib.study.claims.tables.claims_table` of :meth:`claim_rows` (``regimes``: the regimes'
        measurements its premises are read from; default `rlvr_lib.study.regime_premises.load_regimes`)."""
        return claims_table(self.claim_rows(measured, table, **context), fmt, regimes=regimes)

    def reading(self, table) -> str:
        """`rlvr_lib.study.claims.tables.claims_reading` of one of this notebook's claims tables."""
        return claims_reading(table, self.limits)

    def measurements_table(self, measured, fmt: str = ".3f", regimes=None, **context):
        return measurements_table(self.measurement_rows(measured, **context), fmt, regimes=regimes)

    def instrument_checks(self, measured, **context):
        return instrument_checks(self.check_rows(measured, **context))

    def fingerprints(self) -> dict[str, str]:
        """Per row id, a hash of everything the row states except its ``changed`` note and its tags."""
        return {r.id: r.fingerprint() for r in (*self.claims, *self.measurements, *self.checks)}

    def tags(self) -> dict[str, str]:
        """Per claim and measurement id, its ``"<regime>/<premise>"`` (checks carry none)."""
        return {r.id: r.tags() for r in (*self.claims, *self.measurements)}

    def changed_rows(self, root: str | Path | None = None, profile: str = "full"):
        """Rows added, changed or removed after the notebook's first ``profile`` record.

        The first record is the earliest ``started`` of ``<experiment>_<profile>``'s runs. When it stored
        fingerprints (:func:`provenance`), each current row is compared with them; when it predates them, the
        rows that say they changed (``changed``) are listed. No record yet: nothing changed after it.

        Returns:
            ``pandas.DataFrame`` with ``id``, ``row`` (the text), ``what`` (``added``/``changed``/``removed``, or
            ``tagged``: a row whose statement is as it was but whose ``"<regime>/<premise>"``, in ``row`` after the
            text, differs from the tags the first record stored, or that record stored none) and ``why`` (for
            ``tagged``: the registry's ``tagged`` note); its ``attrs["first_record"]`` names the first record and
            when it started.
        """
        import pandas as pd

        records = load_runs(f"{self.experiment}_{profile}", root)
        rows: list[dict] = []
        first = min(records, key=lambda r: (r.started, r.run_id)) if records else None
        everything = {r.id: r for r in (*self.claims, *self.measurements, *self.checks)}
        if first is not None:
            stored = (first.extra.get("claims") or {}).get("fingerprints")
            stored_tags = (first.extra.get("claims") or {}).get("tags") or {}
            if stored is not None:
                now = self.fingerprints()
                for rid, fp in now.items():
                    if rid not in stored or stored[rid] != fp:
                        rows.append({"id": rid, "row": everything[rid].text,
                                     "what": "added" if rid not in stored else "changed",
                                     "why": everything[rid].changed or "-"})
                rows += [{"id": rid, "row": "-", "what": "removed", "why": "-"} for rid in stored if rid not in now]
            else:
                rows = [{"id": r.id, "row": r.text, "what": "added" if r.changed.startswith("added") else "changed",
                         "why": r.changed} for r in everything.values() if r.changed]
                rows += [{"id": "-", "row": text, "what": "removed", "why": why} for text, why in self.removed]
            listed = {r["id"] for r in rows if r["what"] == "added"}  # a row added since has no earlier tags
            rows += [{"id": rid, "row": f"{everything[rid].text} [{tags}]", "what": "tagged",
                      "why": self.tagged or "-"}
                     for rid, tags in self.tags().items() if rid not in listed and stored_tags.get(rid) != tags]
        df = pd.DataFrame(rows, columns=["id", "row", "what", "why"])
        df.attrs["first_record"] = None if first is None else f"{first.run_id} (started {first.started})"
        return df


def changed_summary(changed) -> str:
    """Markdown for :meth:`Registry.changed_rows`: one line naming the first full-profile record, one bullet per
    row added, changed or removed after it (the thresholds the notebook states before its runs stay as they were
    except where these bullets say), then the rows only ``tagged`` since, one bullet per regime and premise with
    the rows' ids (a re-tagging, not a rewording: their statements are as they were)."""
    first = changed.attrs.get("first_record")
    if first is None:
        return "**Pre-registration:** no full-profile record yet; every row below is as registered before the runs."
    if changed.empty:
        return f"**Pre-registration:** no row changed after the first full-profile record, `{first}`."
    stated = changed[changed["what"] != "tagged"]
    tagged = changed[changed["what"] == "tagged"]
    if stated.empty:
        lines = [f"**Pre-registration:** no row's statement changed after the first full-profile record (`{first}`); "
                 f"{len(tagged)} rows were tagged since with their regime and premise:", ""]
    else:
        lines = [f"**Pre-registration: {len(stated)} rows changed after the first full-profile record** (`{first}`; "
                 "every other row, with its threshold, is as the notebook stated it before its runs)"
                 + (f"; {len(tagged)} rows were tagged since with their regime and premise" if len(tagged) else "")
                 + ":", ""]
    lines += [f"- {row['what']}: {row['row']} ({row['id']}) -- {row['why']}" for _, row in stated.iterrows()]
    groups: dict[tuple[str, str], list[str]] = {}
    for _, row in tagged.iterrows():
        tags = row["row"].rsplit(" [", 1)[-1].rstrip("]")
        groups.setdefault((tags, row["why"]), []).append(row["id"])
    for (tags, why), ids in groups.items():
        regime, premise = tags.split("/")
        lines.append(f"- tagged: regime {regime}, premise {premise} ({len(ids)} rows: {', '.join(ids)}) -- {why}")
    return "\n".join(lines)


@functools.lru_cache(maxsize=None)
def registry(module: str) -> Registry:
    """The :class:`Registry` of ``rlvr_lib.study.claims.<module>`` (its ``REGISTRY``)."""
    check(isinstance(module, str) and re.fullmatch(r"nb\d\d_\w+", module), "module", module,
          f"one of {sorted(REGISTRIES.values())}")
    reg = importlib.import_module(f"{__name__}.{module}").REGISTRY
    return dataclasses.replace(reg, module=module)


def registry_for(experiment: str) -> Optional[Registry]:
    """The registry of the notebook that owns ``experiment`` (e.g. ``"sage_full"``), or None."""
    prefix = re.sub(r"_(quick|full)$", "", experiment)
    return registry(REGISTRIES[prefix]) if prefix in REGISTRIES else None


def _last_change(path: Path) -> Optional[str]:
    """The last commit that changed the content of the file at ``path``, or None (no git, a file never committed).

    History is followed across renames (``git log --follow``) and a commit that only moved the file (a rename
    with no change, status ``R100``) is passed over: the claims modules were moved here from the package's
    top level, and a record's commit is there to name the rows it was computed with.
    """
    try:
        out = subprocess.run(["git", "log", "--follow", "--format=commit %H", "--name-status", "--", str(path)],
                             cwd=path.parent, capture_output=True, text=True, timeout=10, check=False)
    except Exception:  # provenance is best effort
        return None
    if out.returncode != 0:
        return None
    sha = None
    for line in out.stdout.splitlines():
        if line.startswith("commit "):
            sha = line.split()[1]
        elif line.strip() and sha is not None and line.split("\t")[0] != "R100":  # added, modified, moved and edited
            return sha if re.fullmatch(r"[0-9a-f]{40,64}", sha) else None
    return None


def _module_commit(module: str) -> Optional[str]:
    """The last commit that changed ``rlvr_lib/study/claims/<module>.py`` (:func:`_last_change`), or None."""
    return _last_change(_PKG / f"{module}.py")


def provenance(experiment: str) -> Optional[dict]:
    """What a run record of ``experiment`` stores about its notebook's claims: ``{"module", "commit",
    "fingerprints", "tags"}``; None when no notebook's registry owns the experiment."""
    reg = registry_for(experiment)
    if reg is None:
        return None
    return {"module": reg.module, "commit": _module_commit(reg.module), "fingerprints": reg.fingerprints(),
            "tags": reg.tags()}


def record_extra(experiment: str) -> dict:
    """``{"claims": provenance(experiment)}`` for a run record's ``extra``, or ``{}`` when no notebook owns it.

    `rlvr_lib.study.pipeline` passes it to `rlvr_lib.study.runs.cached_run` for every notebook run:
    the run cache itself knows nothing of claims.
    """
    prov = provenance(experiment)
    return {} if prov is None else {"claims": prov}
