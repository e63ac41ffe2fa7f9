"""Stand-in for ``hccl.split``."""
