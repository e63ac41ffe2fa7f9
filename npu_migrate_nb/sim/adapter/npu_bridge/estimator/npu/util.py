"""Stand-in for ``npu_bridge.estimator.npu.util`` (only the helpers the stand-ins use)."""

import os

_global_dict = {}


def global_dict_init():
    _global_dict.clear()


def set_value(key, value):
    _global_dict[key] = value


def get_value(key, def_value=None):
    return _global_dict.get(key, def_value)


def get_ranksize():
    return os.getenv("RANK_SIZE", "1")
