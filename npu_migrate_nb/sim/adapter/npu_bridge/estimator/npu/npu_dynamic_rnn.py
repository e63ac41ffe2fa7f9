"""Stand-in for ``npu_bridge.estimator.npu.npu_dynamic_rnn``: the chip's fused DynamicRNN layer."""

from npu_migrate_nb.i18n import _
from npu_migrate_nb.sim.adapter import cannot_run as _cannot_run

DYNAMIC_RNN_UNIDIRECTION = "UNIDIRECTIONAL"


class DynamicRNN:
    """The fused LSTM/GRU of the Ascend chip (``DynamicRNN`` kernel)."""

    def __init__(self,
                 hidden_size,
                 dtype,
                 cell_type="LSTM",
                 direction=DYNAMIC_RNN_UNIDIRECTION,
                 cell_depth=1,
                 use_peephole=False,
                 keep_prob=1.0,
                 cell_clip=-1.0,
                 num_proj=0,
                 time_major=True,
                 activation="tanh",
                 forget_bias=0.0,
                 is_training=True):
        raise _cannot_run("npu_dynamic_rnn.DynamicRNN", _("the Ascend chip's fused RNN kernel; use "
                                                          "tf.keras.layers.LSTM/GRU to simulate the model"))
