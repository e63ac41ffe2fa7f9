"""npu-migrate-nb: make single-card Ascend TensorFlow notebooks distributed, and prove it.

The analysis half (``notebook`` -> ``facts`` -> ``rules`` -> ``rewrite`` -> ``report``)
never imports TensorFlow. The simulation half lives in :mod:`npu_migrate_nb.sim`.
"""

__version__ = "0.1.0"


def load_ipython_extension(shell) -> None:
    """``%load_ext npu_migrate_nb``: the ``%%npu_distribute``, ``%npu_cluster``, ``%npu_sim`` and
    ``%npu_panel`` magics."""
    from .magics import load_ipython_extension as load

    load(shell)


def unload_ipython_extension(shell) -> None:
    """``%unload_ext npu_migrate_nb``: the magics go, and any simulated cluster they started stops."""
    from .magics import unload_ipython_extension as unload

    unload(shell)


def pull(expression: str) -> list:
    """The value of ``expression`` on every simulated rank, in rank order, e.g.
    ``pull("history.history['loss']")`` after a ``%%npu_distribute --run`` cell."""
    from .magics import pull as values

    return values(expression)


def one_card():
    """After a ``%%npu_distribute --run`` cell failed on the ranks, its rerun on one card, as an
    AsyncResult: ``one_card().result(60).status`` waits up to a minute for "fails" (it fails on one
    card too) or "runs" (the distributed run breaks it); ``done()``, ``cancel()``. None before."""
    from .magics import one_card as rerun

    return rerun()


def panel():
    """The report of the whole notebook so far (``%npu_panel``)."""
    from .magics import panel as show

    return show()


def _jupyter_labextension_paths():
    """The NPU Distribute side panel (built from labextension/ into the wheel)."""
    return [{"src": "labextension", "dest": "npu-migrate-nb"}]


def _jupyter_server_extension_points():
    """``jupyter server extension enable npu_migrate_nb``: the REST handlers of :mod:`.server`."""
    return [{"module": "npu_migrate_nb.server"}]
