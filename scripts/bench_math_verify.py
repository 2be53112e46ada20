"""Per-call cost of `MathTask.verify`: grading in a worker process against math-verify in-process.

    .venv/bin/python scripts/bench_math_verify.py [--rounds 20]

"in-process" is what `MathTask.verify` did before it graded in worker
processes: ``math_verify.parse`` + ``math_verify.verify`` with their
``signal.alarm`` time limits, on the main thread (the gold answer parsed once).
"worker" is `MathTask.verify` now (pipe round trip, grading policy included).
"round trip" is the pipe alone: a worker asked to grade an empty completion
(no regex match, nothing parsed). Completions: every sample problem's oracle
trace, a wrong boxed answer, a decimal and a sentence with a hedge. Prints the
median and mean milliseconds per call of each.
"""

from __future__ import annotations

import argparse
import statistics
import time

from rlvr_lib.tasks.math_task import _grading_pool, math_sample_task


def _completions(problems):
    for p in problems:
        yield p, p.oracle_trace
        yield p, r"\boxed{17}"
        yield p, "So x = 0.333333."
        yield p, "The answer is $5$. Or maybe $6$."


def _in_process(timeout_s):
    from math_verify import parse, verify

    gold = {}

    def grade(problem, completion):
        if problem.answer not in gold:
            gold[problem.answer] = parse(f"\\boxed{{{problem.answer}}}", parsing_timeout=timeout_s)
        predicted = parse(completion, parsing_timeout=timeout_s)
        return bool(predicted) and verify(gold[problem.answer], predicted, timeout_seconds=timeout_s)

    return grade


def _time(grade, cases, rounds):
    grade(*cases[0])  # warm: imports, the worker's start
    per_call = []
    for _ in range(rounds):
        for problem, completion in cases:
            start = time.perf_counter()
            grade(problem, completion)
            per_call.append(time.perf_counter() - start)
    return 1e3 * statistics.median(per_call), 1e3 * statistics.fmean(per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="passes over the completions (default 20)")
    args = parser.parse_args()
    task = math_sample_task(name="bench", timeout_s=5)
    problems = task.family_problems("all", task.family_capacity("all"))
    cases = list(_completions(problems))
    pool = _grading_pool()
    trip = lambda problem, completion: pool.request({"answer": "1", "completion": "", "budget_s": 5}, 7)
    rows = [("in-process (before)", _time(_in_process(5), cases, args.rounds)),
            ("worker (MathTask.verify)", _time(task.verify, cases, args.rounds)),
            ("round trip only", _time(trip, cases[:50], args.rounds))]
    print(f"{len(cases)} completions x {args.rounds} rounds")
    for name, (median, mean) in rows:
        print(f"{name:26s} median {median:7.3f} ms   mean {mean:7.3f} ms")


if __name__ == "__main__":
    main()
