"""The study harness: what reproduces the papers on top of the library.

The library (every other top-level module and package of ``rlvr_lib``) never imports it
(``tests/test_import_graph.py``). Its parts:

* run records and their statistics -- :mod:`rlvr_lib.study.runs` (the run cache), :mod:`rlvr_lib.study.stats`
  (every interval), :mod:`rlvr_lib.study.summaries`, :mod:`rlvr_lib.study.claims` (pre-registered claim rows and
  their tables);
* running the study -- :mod:`rlvr_lib.study.papers` (the manifest), :mod:`rlvr_lib.study.pipeline`,
  :mod:`rlvr_lib.study.arms`, :mod:`rlvr_lib.study.calibration`, :mod:`rlvr_lib.study.dynamics`,
  :mod:`rlvr_lib.study.tuning`, :mod:`rlvr_lib.study.probes`, :mod:`rlvr_lib.study.reproduce`;
* showing it -- :mod:`rlvr_lib.study.plots`, :mod:`rlvr_lib.study.report`, :mod:`rlvr_lib.study.provenance`,
  :mod:`rlvr_lib.study.bench`.

What each module holds: docs/study/README.md.
"""
