"""npu-migrate-nb: make single-card Ascend TensorFlow notebooks distributed, and prove it.

The analysis half (``notebook`` -> ``facts`` -> ``rules`` -> ``rewrite`` -> ``report``)
never imports TensorFlow. The simulation half lives in :mod:`npu_migrate_nb.sim`.
"""

__version__ = "0.1.0"
