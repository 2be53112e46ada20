"""A run function for the run-cache tests (tests/test_runs.py, tests/hostile/test_run_records.py); a module of its
own so processes the tests spawn import it too."""


class CountingRun:
    """A run function for `rlvr_lib.study.runs.cached_run` that counts its calls: a three-step history and
    ``final`` (default ``{"pass@1": 0.25}``)."""

    def __init__(self, final=None):
        self.calls = 0
        self.final = final if final is not None else {"pass@1": 0.25}

    def __call__(self):
        self.calls += 1
        return [{"step": i, "loss": 1.0 / (i + 1)} for i in range(3)], dict(self.final)
