"""The simulator: the notebook's cells on N local ranks, with stand-ins for the Ascend adapter.

Proof mode, the default of every door: each training call stops once the three checks are decided,
after at most ``DEFAULT_PROOF_STEPS`` more steps (``--steps N``); ``--full`` trains as written.
"""

DEFAULT_PROOF_STEPS = 1
