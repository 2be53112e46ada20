"""Other training loops that run the library's methods: `rlvr_lib.backends.trl` hosts them on TRL's ``GRPOTrainer``.

Importing this package imports no backend (TRL is imported only by ``rlvr_lib.backends.trl``).
"""

BACKENDS = ("native", "trl")
"""``python -m rlvr_lib train --backend`` choices: the library's own loop (`rlvr_lib.trainer.Trainer`) or TRL's."""
