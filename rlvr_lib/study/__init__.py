"""The study harness: what reproduces the papers on top of the library (issue 30).

Being moved here from the flat package, one concept at a time; the library
(everything outside ``study/``) is meant never to import it.

* :mod:`rlvr_lib.study.stats` -- statistics over run records: every interval
  (Student-t and bootstrap over seeds, seeds x problems, paired differences,
  the summary tables' pass@k and per-seed intervals, their formatting),
  rescued / lost problems, strategy shares.
* :mod:`rlvr_lib.study.runs` -- run records on disk; so far the strict-JSON
  form of their values (`jsonable`).
"""
