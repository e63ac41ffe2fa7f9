"""Stand-in for the HCCL python package (``hccl.manage.api``, ``hccl.split.api``)."""
__simulated__ = True
