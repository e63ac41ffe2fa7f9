"""Stand-in for ``npu_bridge.estimator.npu_ops``: system init/shutdown ops.

On a chip these start and stop the device; in the simulator they initialise the MPI-backed
collectives and are otherwise no-ops.
"""

import tensorflow as tf

from npu_migrate_nb.sim import comm


def initialize_system(name=None):
    comm.init()
    return tf.no_op(name=name or "npu_initialize_system")


def shutdown_system(name=None):
    return tf.no_op(name=name or "npu_shutdown_system")


def NPUInit(name=None):
    return initialize_system(name)


def NPUShutdown(name=None):
    return shutdown_system(name)
