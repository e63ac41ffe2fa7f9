"""Stand-in for ``npu_device.compat.v1``, the build's copy of ``npu_bridge`` for TF2 programs that
run TF1 code (``npu.compat.enable_v1()``). The stand-in copies nothing: its modules re-export the
``npu_bridge`` stand-ins."""
