"""The study harness: what reproduces the papers on top of the library (issue 30).

Being moved here from the flat package, one concept at a time; the library
(everything outside ``study/``) is meant never to import it.

* :mod:`rlvr_lib.study.stats` -- statistics over run records: every interval
  (bootstrap over seeds, seeds x problems, paired differences), rescued / lost
  problems, strategy shares.
"""
