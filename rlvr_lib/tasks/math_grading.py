r"""`MathTask`'s grading policy on top of math-verify, and the worker process that applies it.

`grade` decides one completion against one gold answer:

* final answer: what math-verify extracts (``\boxed{}`` or "final answer is", then "answer ...", then the last
  expression); nothing extracted -> ``malformed``;
* equivalence: ``math_verify.verify``, except that a decimal means the exact rational it writes unless the gold
  answer is a decimal (then matched at its own places), and several values against one are ``wrong``;
* hedges: any other value after the final answer (or between its boxes) that is not an equivalent restatement,
  whatever the words around it -> ``wrong``; equivalent restatements in several boxes are one answer;
* past the time budget: ``timeout`` (reward 0).

Grading runs in worker processes (`serve`, via `rlvr_lib.tasks.worker_pool.WorkerPool`) with their own
interval timer, since math-verify's ``signal.alarm`` works on the main thread only. This module imports nothing
from ``rlvr_lib``. The policy and the worker design: docs/tasks/math_grading.md."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import struct
from functools import lru_cache
from typing import Iterator
from itertools import groupby

CORRECT, WRONG, MALFORMED, TIMEOUT = "correct", "wrong", "malformed", "timeout"
GOLD_UNPARSED = "the gold answer cannot be parsed"

MAX_HEDGE_CANDIDATES = 20
"""At most this many distinct values after the final answer are compared with it (bounds the hedge check's cost);
a completion with more is ``wrong``, so a hedge cannot hide behind a run of restatements."""
WORKER_MEMORY_BYTES = 4 << 30
"""Address-space limit of a grading worker: a huge power or expansion fails with MemoryError, not host swap."""
DEFAULT_DECIMALS = 6
"""math-verify's own rounding, used for a decimal gold answer whose places cannot be read."""

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_DOLLARS = re.compile(r"\\.|\$\$|\$", re.DOTALL)
_DECIMAL_PLACES = re.compile(r"\d*\.(\d+)")
_HEADER = struct.Struct(">I")


class _Deadline(BaseException):
    """Raised by the worker's interval timer; a BaseException, so ``except Exception`` handlers cannot swallow it."""


# --------------------------------------------------------------------------- extraction


@lru_cache(maxsize=1)
def _regexes():
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import get_extraction_regexes

    # parse()'s default targets
    return get_extraction_regexes((LatexExtractionConfig(), ExprExtractionConfig()))


def _matches(text: str) -> list:
    """Every match of math-verify's answer regexes, in ``math_verify.parse``'s order."""
    found = []
    for patterns, target in _regexes():
        for pattern, priority in patterns:
            for match in pattern.finditer(text):
                found.append((priority, -match.end(), match.start(), match, target))
    found.sort(key=lambda item: item[:3])
    return found


def _final(text: str) -> tuple[list, int, list]:
    """``(parsed, end, parts)`` of the final answer: see `final_answer` and `_parts`."""
    from math_verify.parser import extract_match

    fallbacks, fallback_end = [], len(text)
    for _, group in groupby(_matches(text), key=lambda item: item[0]):
        for _, negative_end, _, match, target in group:
            value, fallback = extract_match(match, target)
            if fallback:
                if not fallbacks:
                    fallback_end = -negative_end
                fallbacks.append(fallback)
            if value is not None:
                return [value, *fallbacks[:1]], -negative_end, _parts(match, target)
    return fallbacks[:1], fallback_end, []


def final_answer(text: str) -> tuple[list, int]:
    """``(parsed, end)``: what ``math_verify.parse(text)`` returns and where its match ends (``([], len(text))`` if none)."""
    parsed, end, _ = _final(text)
    return parsed, end


def _closing_brace(text: str, opening: int, limit: int) -> int | None:
    depth = 1
    for i in range(opening + 1, limit):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def box_spans(text: str, mode: str) -> list[tuple[int, int, int, int]]:
    """The boxes whose contents ``latex2sympy2_extended``'s ``extract_boxed_content(text, mode)`` joins, left to right.

    Each is ``(start, content_start, content_end, end)``: the ``\\boxed`` command, its content, and the index after the
    closing brace. Mirrors that function's right-to-left search (``"last"``: a box joins the one after it when fewer
    than 10 characters, or fewer than 70 with a separator and a different content, lie between them), keeping the
    repeated boxes it deduplicates; a test holds the joined contents equal to its result."""
    from latex2sympy2_extended.math_normalization import VALID_SEPARATOR_PATTERN

    spans: list[tuple[int, int, int, int]] = []
    contents: list[str] = []
    current = limit = len(text)
    while True:
        found = [(text.rfind(command, 0, current), len(command)) for command in _BOX_COMMANDS]
        start, length = max(found)
        if start < 0:
            break
        brace = start + length
        while brace < limit and text[brace].isspace():
            brace += 1
        if brace >= limit:
            break
        close = _closing_brace(text, brace, limit) if text[brace] == "{" else None
        if close is None:  # an unclosed or brace-less last box: the rest of the text
            if not spans:
                spans.append((start, brace, len(text), len(text)))
            break
        content = text[brace + 1:close].strip()
        if mode == "last" and spans:
            between = text[close + 1:spans[-1][0]]
            if not (len(between) < 10 or (contents[-1] != content and len(between) < 70
                                          and VALID_SEPARATOR_PATTERN.search(between))):
                break
        if not contents or contents[-1] != content:
            contents.append(content)
        spans.append((start, brace + 1, close, close + 1))
        limit = current = start
    return spans[::-1]


def _parts(match, target) -> list[tuple[int, int, int, int]]:
    """The pieces of ``text`` that a final-answer match reads, left to right, as `box_spans` gives them: its boxes
    (``\\boxed{}`` matches join close boxes, other LaTeX matches read every box inside them), else its LaTeX groups;
    ``[]`` for a plain expression match."""
    from math_verify import LatexExtractionConfig

    if not isinstance(target, LatexExtractionConfig):
        return []
    parts = []
    for name, value in match.groupdict().items():
        kind = name.split("_")[1] if "_" in name else ""
        if not value or not kind.startswith("latex"):
            continue
        offset = match.start(name)
        if any(command in value for command in _BOX_COMMANDS):
            boxes = box_spans(value, "last" if kind == "latexBoxed" else "all")
            parts.extend(tuple(offset + i for i in box) for box in boxes)
        else:
            parts.append((offset, offset, match.end(name), match.end(name)))
    return sorted(parts)


def _open_dollars(text: str) -> str:
    """The ``$`` or ``$$`` that ``text`` leaves open (``""`` if none): a piece cut after it starts inside that math."""
    state = ""
    for token in _DOLLARS.findall(text):
        if token.startswith("\\"):
            continue
        state = "" if token == state else (state or token)
    return state


def _values_in(text: str, start: int, end: int) -> Iterator:
    """Every value math-verify can extract from ``text[start:end]``, each match on its own (`_matches`).

    The piece is read as if it started inside the math that ``text[:start]`` leaves open, so that its ``$`` pair as
    in the whole text."""
    from math_verify.parser import extract_match

    opened = _open_dollars(text[:start])
    piece = (opened + " " if opened else "") + text[start:end]
    for *_, match, target in _matches(piece):
        value, _ = extract_match(match, target)
        if value is not None:
            yield value


# --------------------------------------------------------------------------- comparison


@lru_cache(maxsize=4096)
def parsed_gold(answer: str) -> tuple:
    """The gold answer as math-verify reads it (boxed, as the oracle trace writes it); cached per answer."""
    from math_verify import parse

    return tuple(parse(f"\\boxed{{{answer}}}", parsing_timeout=None))


def gold_decimals(answer: str, gold) -> int | None:
    """Decimal places of a gold answer written as a decimal (``"3.14"`` -> 2), else ``None``."""
    import sympy

    if not any(isinstance(g, sympy.Basic) and g.atoms(sympy.Float) for g in gold):
        return None
    places = [len(m.group(1)) for m in _DECIMAL_PLACES.finditer(answer)]
    return max(places) if places else DEFAULT_DECIMALS


def exact(value):
    """``value`` with every decimal replaced by the exact rational it writes (``0.333333`` -> 333333/1000000)."""
    import sympy

    if not isinstance(value, (sympy.Basic, sympy.MatrixBase)):
        return value
    try:
        swaps = {}
        for decimal in value.atoms(sympy.Float):
            # str() gives the decimal digits the answer wrote (15 significant), not the binary approximation
            swaps[decimal] = sympy.Rational(str(decimal))
        return value.xreplace(swaps) if swaps else value
    except (TypeError, ValueError, AttributeError):  # inf / nan, an object without atoms: math-verify decides
        return value


def is_several(value) -> bool:
    """Whether a parsed answer holds several values (a set, tuple, interval, list or matrix)."""
    import sympy

    return isinstance(value, (sympy.Set, sympy.Tuple, sympy.MatrixBase, list, tuple))


def _same(gold, predicted, decimals: int | None) -> bool:
    from math_verify import verify

    rounding = DEFAULT_DECIMALS if decimals is None else decimals
    return verify(list(gold), list(predicted), float_rounding=rounding, timeout_seconds=None)


def _one_value(latex: str, decimals: int | None):
    """The single value a box or LaTeX group holds, or ``None`` (nothing parsed, or several values)."""
    from math_verify import parse

    parsed = parse(f"\\boxed{{{latex}}}", parsing_timeout=None)
    if not parsed or is_several(parsed[0]):
        return None
    return parsed[0] if decimals is not None else exact(parsed[0])


def _restatements(completion: str, parts: list, decimals: int | None) -> list | None:
    """``[value, latex]`` of the first part when several parts each hold one value, all equivalent; else ``None``."""
    values = []
    for _, content_start, content_end, _ in parts:
        value = _one_value(completion[content_start:content_end], decimals)
        if value is None or (values and not _same(values[:1], [value], decimals)):
            return None
        values.append(value)
    first = parts[0]
    return [values[0], completion[first[1]:first[2]]]


def _hedge(completion: str, predicted: list, end: int, parts: list, decimals: int | None) -> str:
    """The reason ``completion`` is hedged (``""`` if it is not): a value between the final answer's parts or after
    it that is not equivalent to it, or more than `MAX_HEDGE_CANDIDATES` distinct values there."""
    gaps = [(left[3], right[0]) for left, right in zip(parts, parts[1:])]
    gaps.append((parts[-1][3] if parts else end, len(completion)))
    seen: set[str] = set()
    for start, stop in gaps:
        for value in _values_in(completion, start, stop):
            value = value if decimals is not None else exact(value)
            key = str(value)
            if key in seen:
                continue
            seen.add(key)
            if len(seen) > MAX_HEDGE_CANDIDATES:
                return f"hedged: more than {MAX_HEDGE_CANDIDATES} other values follow the final answer"
            if not _same(predicted[:1], [value], decimals):
                return f"hedged: another value ({key[:40]}) follows the final answer"
    return ""


def grade(answer: str, completion: str) -> tuple[str, str]:
    """``(status, reason)`` of ``completion`` against the gold ``answer``; no time limit of its own (`grade_within`)."""
    gold = parsed_gold(answer)
    predicted, end, parts = _final(completion)
    if not predicted:
        return MALFORMED, "no final answer found"
    if not gold:
        return WRONG, GOLD_UNPARSED
    decimals = gold_decimals(answer, gold)
    if decimals is None:
        predicted = [exact(p) for p in predicted]
    if is_several(predicted[0]) and not is_several(gold[0]) and len(parts) > 1:
        one = _restatements(completion, parts, decimals)  # "\boxed{\frac12}, i.e. \boxed{\frac24}": one answer
        predicted = one if one is not None else predicted
    if is_several(predicted[0]) and not is_several(gold[0]):
        return WRONG, "several answers where the gold answer is one value"
    if not _same(gold, predicted, decimals):
        return WRONG, "answer differs from the gold answer"
    reason = _hedge(completion, predicted, end, parts, decimals)
    if reason:
        return WRONG, reason
    return CORRECT, ""


@contextlib.contextmanager
def wall_clock_limit(budget_s: float) -> Iterator[None]:
    """Raise `_Deadline` after ``budget_s`` seconds of wall-clock time (``SIGALRM``; main thread only)."""
    def expire(signum, frame):
        raise _Deadline

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, budget_s)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def grade_within(answer: str, completion: str, budget_s: float) -> tuple[str, str]:
    """`grade` with a ``budget_s`` wall-clock limit (``timeout``); an exception of math-verify or sympy is ``malformed``."""
    try:
        with wall_clock_limit(budget_s):
            return grade(answer, completion)
    except _Deadline:
        return TIMEOUT, f"grading ran past its {budget_s:g} s budget"
    except RecursionError:
        return MALFORMED, "the answer is nested too deeply to parse"
    except Exception as exc:  # noqa: BLE001 - model output must never stop the worker
        return MALFORMED, f"math-verify failed: {type(exc).__name__}"


# --------------------------------------------------------------------------- the worker


def write_frame(fd: int, message: dict) -> None:
    """One length-prefixed JSON message to a pipe."""
    data = json.dumps(message).encode("utf-8")
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict | None:
    """One message from a pipe, blocking; ``None`` at end of file (the parent closed it or died)."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    body = _read_exact(fd, _HEADER.unpack(header)[0])
    return None if body is None else json.loads(body)


def serve() -> None:
    """The worker loop: read ``{"answer", "completion", "budget_s"}``, reply ``{"status", "reason"}``; ``{"ready": true}`` once warm."""
    import resource

    replies = os.dup(1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the reply pipe
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # disabled-timeout notices: the budget is ours
    try:
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    except (ValueError, OSError):  # a lower hard limit already: keep it
        pass
    grade_within("\\frac{1}{2}", "The answer is $\\boxed{0.5}$. Or maybe $1/2$.", 60.0)  # load the grammars
    write_frame(replies, {"ready": True})
    while True:
        request = read_frame(0)
        if request is None:
            return
        status, reason = grade_within(request["answer"], request["completion"], float(request["budget_s"]))
        write_frame(replies, {"status": status, "reason": reason})


if __name__ == "__main__":
    serve()
