"""Stand-in for the TF1 Ascend adapter ``npu_bridge`` (simulated on CPU over MPI)."""
__simulated__ = True
