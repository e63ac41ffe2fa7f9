"""Stand-in for ``npu_bridge.estimator.npu.npu_scope``: scopes that tag the ops built inside
with attributes for the graph engine (``_without_npu_compile``, ``_keep_dtype``,
``_variable_placement``), as on the chip; CPU kernels ignore them."""

import contextlib

import tensorflow as _tf
from tensorflow.core.framework import attr_value_pb2

from npu_bridge.estimator.npu.npu_config import NpuExecutePlacement


@contextlib.contextmanager
def without_npu_compile_scope():
    with _tf.compat.v1.get_default_graph()._attr_scope({"_without_npu_compile": attr_value_pb2.AttrValue(b=True)}):
        yield


@contextlib.contextmanager
def npu_variable_scope(placement=NpuExecutePlacement.ALL):
    if placement not in NpuExecutePlacement:
        raise ValueError("placement vaule must be in NpuExecutePlacement's vaule")
    attrs = {"_variable_placement": attr_value_pb2.AttrValue(s=placement.value.encode())}
    with _tf.compat.v1.get_default_graph()._attr_scope(attrs):
        yield


@contextlib.contextmanager
def keep_dtype_scope():
    with _tf.compat.v1.get_default_graph()._attr_scope({"_keep_dtype": attr_value_pb2.AttrValue(i=1)}):
        yield
