"""What Keras uses when ``compile`` is not told: the optimizer it trains with by default.

``model.compile(loss=..., metrics=...)`` trains with ``'rmsprop'`` (Keras' default), so the
all-reduce fix has an optimizer to wrap even where none is written: it adds
``optimizer=<wrapper>(tf.keras.optimizers.RMSprop())``, the same optimizer with its defaults.
"""

from __future__ import annotations

from typing import Optional

from ..facts import CallSite, CellFacts
from ..findings import Edit
from .base import add_argument, keras_prefix

KERAS_DEFAULT_OPTIMIZER = "RMSprop"


def compiles_with_default_optimizer(site: CallSite) -> bool:
    """A Keras ``compile`` with a loss and no optimizer: no positional argument (the optimizer is the
    first), ``loss=`` given (``re.compile(...)`` and the like have none)."""
    keywords = site.node.keywords
    return (not site.node.args and site.keyword("optimizer") is None and site.keyword("loss") is not None
            and all(keyword.arg is not None for keyword in keywords))  # no **config that may hold one


def default_optimizer_argument(
    context, cell: int, facts: CellFacts, site: CallSite, wrapper: str, needs: str
) -> Optional[Edit]:
    """``optimizer=<wrapper>(<keras>.optimizers.RMSprop())`` added to a compile that has no optimizer,
    or None when ``site`` is not such a compile."""
    if not compiles_with_default_optimizer(site):
        return None
    code = f"optimizer={wrapper}({keras_prefix(context)}.optimizers.{KERAS_DEFAULT_OPTIMIZER}())"
    return add_argument(cell, facts, site.node, code, [needs])
