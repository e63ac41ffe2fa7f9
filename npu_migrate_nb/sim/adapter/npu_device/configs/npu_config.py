"""Stand-in for ``npu_device.configs.npu_config``: the options ``npu.global_options()`` holds.

The real NpuConfig is a tree of checked options for the graph engine; none changes a result on
the CPU, so the stand-in keeps whatever is set and gives it back from ``as_dict``.
"""


class NpuConfig:
    """Set NPU configuration"""

    def __init__(self):
        pass

    def as_dict(self):
        return dict(self.__dict__)
