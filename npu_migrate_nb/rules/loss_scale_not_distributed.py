"""``NPULossScaleOptimizer`` without ``is_distributed=True`` on N cards: each rank reads its own float
status (did its step overflow?), so when one rank's scaled gradients overflow and the others' do not,
that rank skips its update while the others apply theirs, and the weights drift apart for good.
With ``is_distributed=True`` the adapter all-reduces the status (``apply_gradients`` of
``npu_loss_scale_optimizer.py``), so every rank skips the same steps. It does not aggregate the
gradients: that is the optimizer inside it (missing-allreduce wraps it). The TF2
``NpuLossScaleOptimizer`` sums the status over ranks by itself.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from .. import knowledge as K
from ..analysis import is_distributed_argument, sets_is_distributed
from ..findings import Finding
from ..i18n import _
from .base import Example, Rule, add_argument, replace


class LossScaleNotDistributed(Rule):
    code = "loss-scale-not-distributed"
    step = "allreduce"
    severity = "error"

    VALID = [
        "from npu_bridge.npu_init import *\n"
        "opt = NPULossScaleOptimizer(npu_distributed_optimizer_wrapper(opt), manager, is_distributed=True)\n",
        "from npu_bridge.npu_init import *\n"
        "opt = NPULossScaleOptimizer(opt, manager, is_distributed=int(os.getenv('RANK_SIZE', '1')) > 1)\n",
    ]
    INVALID = [
        Example(
            "from npu_bridge.npu_init import *\n"
            "manager = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 32, incr_every_n_steps=1000)\n"
            "opt = NPULossScaleOptimizer(npu_distributed_optimizer_wrapper(opt), manager)\n",
            "from npu_bridge.npu_init import *\n"
            "manager = ExponentialUpdateLossScaleManager(init_loss_scale=2 ** 32, incr_every_n_steps=1000)\n"
            "opt = NPULossScaleOptimizer(npu_distributed_optimizer_wrapper(opt), manager, is_distributed=True)\n",
        ),
        Example(
            "from npu_bridge.npu_init import *\n"
            "opt = NPULossScaleOptimizer(npu_distributed_optimizer_wrapper(opt), FixedLossScaleManager(1024), False)\n",
            "from npu_bridge.npu_init import *\n"
            "opt = NPULossScaleOptimizer(npu_distributed_optimizer_wrapper(opt), FixedLossScaleManager(1024), True)\n",
        ),
    ]

    def check(self, context) -> Iterable[Finding]:
        return list(self._findings(context))

    def _findings(self, context) -> Iterator[Finding]:
        for cell, facts, site in context.facts.calls_to(*K.LOSS_SCALE_OPTIMIZERS):
            if sets_is_distributed(context.facts, site):
                continue
            value = is_distributed_argument(context.facts, site)
            edit = add_argument(cell, facts, site.node, "is_distributed=True") if value is None else \
                replace(cell, facts, value, "True")
            yield self.finding(
                cell, facts, site.node,
                _("NPULossScaleOptimizer without is_distributed=True: each rank decides alone whether its step "
                  "overflowed, so a rank whose scaled gradients overflow skips an update the others apply and the "
                  "weights drift apart; is_distributed=True all-reduces the overflow status (not the gradients)"),
                [edit],
            )
