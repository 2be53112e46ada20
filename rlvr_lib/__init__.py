"""rlvr_lib: a reproducible, Jupyter-first study of exploration in RL with verifiable rewards.

One tested library holds every algorithm and kernel (tasks, policy, rollout,
rewards, algos, methods, trainer, kernels, eval); the study harness,
``rlvr_lib.study`` (run cache, claims, pipeline, report, ...), builds on it
and never the other way round; thin papermill-parameterised notebooks under
``notebooks/`` reproduce the tables and ablations of NudgeRL, 3PO, SAGE and
VIGOR with it, and write to ``results/``.
"""

__version__ = "0.1.0"
