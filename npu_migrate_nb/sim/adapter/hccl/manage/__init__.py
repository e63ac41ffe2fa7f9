"""Stand-in for ``hccl.manage``."""
