"""Stand-in for ``npu_bridge.estimator.npu.npu_convert_dropout``.

Importing the real module makes legacy Keras ``Dropout`` layers call ``npu_ops.dropout``, the same
keep probability on the chip's kernel; on the CPU the layer's own dropout is that already, so the
stand-in changes nothing.
"""
