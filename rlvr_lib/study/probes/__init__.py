"""Paper-specific probes: measurements that run the trainer or a method on the testbed.

They sit above the library (they may import `rlvr_lib.trainer` and `rlvr_lib.methods`), which is why
they left `rlvr_lib.eval`, whose metrics of a policy sit below both.

* :mod:`rlvr_lib.study.probes.weight_steps` -- how far each RL step moves the weights (3PO's IVON vs
  AdamW step sizes).
* :mod:`rlvr_lib.study.probes.ivon_regime` -- 3PO's IVON regime calibration (clip radius and IVON lr)
  and the check that 3PO records stepped with the IVON lr their config gives.
* :mod:`rlvr_lib.study.probes.branch_reorder` -- 3PO's Figure 1 measurement (branch reordering under weight
  noise) through the run cache.
* :mod:`rlvr_lib.study.probes.grad_norm_profile` -- VIGOR's ``||g||`` against length and accuracy by
  score rank.
"""
