"""How the single-card comparison judges: the first update's ratio when observed, the final weights
within a tolerance that grows with the steps taken, and what it says it held fixed."""

import numpy as np
import pytest

from npu_migrate_nb.sim import checks

pytestmark = pytest.mark.sim
START = [1.0, 2.0, -1.0]


def weights(moment, values, seq, **extra):
    return {"kind": "weights", "moment": moment, "names": ["w:0"], "fingerprint": str(values),
            "samples": [np.asarray(values, dtype=np.float64)], "count": 1, "source": "optimizer step", "cell": 5,
            "seq": seq, **extra}


def first_batch(rows, deterministic=True):
    return {"kind": "input", "fingerprint": "".join(rows), "deterministic": deterministic, "sharded": True,
            "rows": sorted(rows), "source": "dataset iteration", "cell": 5, "seq": 0}


def held_shuffle(cell=2, line=7):
    return {"kind": "held", "what": "shuffle", "site": [cell, "<module>", line], "source": "comparison",
            "cell": cell, "seq": 0}


def training(change, first_change=None, steps=24, rows=("a", "b", "c", "d"), deterministic=True, held=()):
    """Records of one run: start, optionally the first update's result, end after ``steps`` steps."""
    start = np.asarray(START)
    records = list(held) + [first_batch(list(rows), deterministic), weights("start", list(start), 1)]
    if first_change is not None:
        records.append(weights("step1", list(start + first_change), 2))
    records.append(weights("end", list(start + change), 3, steps=steps))
    return records


ONE_CARD_FIRST = np.array([0.1, -0.2, 0.05])
ONE_CARD_CHANGE = np.array([1.0, -2.0, 0.5])


def judge(rank_change, rank_first=None, size=2, steps=24, one_first=ONE_CARD_FIRST, **single):
    split = [("a", "b", "c", "d")[r::size] for r in range(size)]
    records = {r: training(rank_change, rank_first, steps, rows=split[r], held=[held_shuffle()]) for r in range(size)}
    one_card = training(ONE_CARD_CHANGE, one_first if rank_first is not None else None, steps,
                        held=[held_shuffle()], **single)
    return checks.check_single_card(records, size, one_card)


def test_correct_math_at_a_high_learning_rate_passes_though_the_weights_drifted_over_the_steps():
    # exact first update, 1% of the change apart after 24 steps: float order amplified, not a wrong reduction
    check = judge(ONE_CARD_CHANGE * 1.01, ONE_CARD_FIRST)
    assert check.status == "pass", check
    assert "first update 1.00x one card's" in check.detail and "24 steps" in check.detail


def test_the_same_drift_after_one_step_fails():
    assert judge(ONE_CARD_CHANGE * 1.01, ONE_CARD_FIRST, steps=1).status == "fail"


@pytest.mark.parametrize("size", [2, 4, 8])
def test_a_mean_over_a_loss_divided_by_the_global_batch_fails_with_one_over_n(size):
    check = judge(ONE_CARD_CHANGE / size, ONE_CARD_FIRST / size, size=size)
    assert check.status == "fail", check
    assert f"the first update was 1/{size} of one card's" in check.detail
    assert 'reduction="sum"' in check.detail


def test_a_sum_over_per_rank_means_fails_with_n_times():
    check = judge(ONE_CARD_CHANGE * 4, ONE_CARD_FIRST * 4, size=4)
    assert check.status == "fail" and "the first update was 4 times one card's" in check.detail, check


def test_without_the_first_update_the_final_weights_give_the_factor():
    check = judge(ONE_CARD_CHANGE / 2)
    assert check.status == "fail" and "the updates were 1/2 of one card's" in check.detail, check


def test_runs_that_part_after_a_matching_first_update_fail_without_blaming_the_reduction():
    check = judge(ONE_CARD_CHANGE * 1.3, ONE_CARD_FIRST)
    assert check.status == "fail", check
    assert "the first update matched one card's (1.00x)" in check.detail and "1/2" not in check.detail


def test_the_tolerance_grows_with_the_steps_up_to_a_cap():
    assert checks.final_tolerance(1) == pytest.approx(1e-3)
    assert checks.final_tolerance(24) == pytest.approx(2.4e-2)
    assert checks.final_tolerance(10_000) == checks.SINGLE_CARD_RTOL_CAP
    assert checks.final_tolerance(None) == checks.SINGLE_CARD_RTOL_CAP


def test_the_pass_says_what_was_held_fixed():
    check = judge(ONE_CARD_CHANGE, ONE_CARD_FIRST)
    assert check.detail.endswith("held fixed in both runs: the shuffle after the shard (cell 2, line 7)"), check


def test_first_batches_that_differ_because_of_a_random_pipeline_say_so_in_one_line():
    records = {r: training(ONE_CARD_CHANGE, rows=rows, deterministic=False)
               for r, rows in enumerate((["a", "x"], ["c", "y"]))}
    check = checks.check_single_card(records, 2, training(ONE_CARD_CHANGE))
    assert check.status == "not-observed", check
    assert "a shuffle before the shard draws differently in the two runs" in check.detail
    assert "\n" not in check.detail
