"""The study harness: what reproduces the papers on top of the library (issue 30).

The library (every other top-level module and package of ``rlvr_lib``) never
imports it; ``tests/test_import_graph.py`` checks that, that the top level
holds only the library, the command line (``rlvr_lib.__main__``) and this
package, and that no import cycle exists.

Run records and their statistics:

* :mod:`rlvr_lib.study.runs` -- the run cache (``results/<experiment>/<run_id>.json``,
  resumable, one computation per run across processes), run records and their
  provenance (machine, packages, commit), the strict-JSON form of results
  (`jsonable`), the results root and the one rule for file-name-safe names.
* :mod:`rlvr_lib.study.stats` -- statistics over run records: every interval
  (Student-t and bootstrap over seeds, seeds x problems, paired differences,
  the summary tables' pass@k and per-seed intervals, their formatting),
  rescued / lost problems, strategy shares.
* :mod:`rlvr_lib.study.summaries` -- run records summarised for the notebooks'
  and README's tables.
* :mod:`rlvr_lib.study.claims` -- each notebook's pre-registered claim rows
  (``claims/nb0X_*.py``), their provenance in run records and the rows changed
  after a notebook's first full-profile record;
  :mod:`rlvr_lib.study.claims.tables` -- verdicts, claims and measurements
  tables, instrument checks, the summaries README's scorecard reads.

Running the study:

* :mod:`rlvr_lib.study.pipeline` -- train a method and evaluate it as one
  cached, resumable run; the command line's ``train``.
* :mod:`rlvr_lib.study.arms` -- what the method notebooks share: train a
  table's arms through the run cache, compare them problem by problem.
* :mod:`rlvr_lib.study.calibration`, :mod:`rlvr_lib.study.dynamics` -- the
  testbed's static and dynamics calibration.
* :mod:`rlvr_lib.study.tuning` -- the equal lr-tuning budget.
* :mod:`rlvr_lib.study.probes` -- paper-specific probes: the four premises,
  3PO's IVON regime and weight steps, VIGOR's gradient-norm profile.
* :mod:`rlvr_lib.study.reproduce` -- every notebook with papermill, resumably
  (``make reproduce``).

Showing it:

* :mod:`rlvr_lib.study.plots` -- the notebooks' figures.
* :mod:`rlvr_lib.study.report` -- README's results section and reliability
  table, rendered from ``results/``.
* :mod:`rlvr_lib.study.provenance` -- the stale-record check: which committed
  records were made by code or data that changed since, and whether each
  change is declared result-neutral (``results/result_neutral_commits.json``).
* :mod:`rlvr_lib.study.bench` -- benchmarks against their baselines, measured in
  the same run, written to ``results/bench/`` (``make bench``).
"""
