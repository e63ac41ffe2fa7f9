"""The three checks judged from probe records: pass, fail and the honest not-observed cases."""

import numpy as np
import pytest

from npu_migrate_nb.sim import checks

pytestmark = pytest.mark.sim


def weights(moment, values, seq, source="keras fit", cell=3):
    arrays = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in values]
    return {"kind": "weights", "moment": moment, "names": ["w:0"], "fingerprint": str([list(a) for a in arrays]),
            "samples": arrays, "count": len(arrays), "source": source, "cell": cell, "seq": seq}


def batch(fingerprint, seq=0, deterministic=True, sharded=False, source="keras fit dataset"):
    return {"kind": "input", "fingerprint": fingerprint, "deterministic": deterministic, "sharded": sharded,
            "source": source, "cell": 3, "seq": seq}


def rank(data, start, end):
    return [data, weights("start", [start], 1), weights("end", [end], 2)]


def test_a_correct_run_passes_all_three():
    records = {0: rank(batch("a"), [1.0, 2.0], [0.5, 1.5]), 1: rank(batch("b"), [1.0, 2.0], [0.5, 1.5])}
    result = checks.evaluate(records, 2)
    assert {name: c.status for name, c in result.items()} == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
    assert result["broadcast"].cell == 3


def test_different_start_weights_fail_broadcast_with_the_fix():
    records = {0: rank(batch("a"), [1.0], [0.5]), 1: rank(batch("b"), [3.0], [2.5])}
    result = checks.evaluate(records, 2)
    assert result["broadcast"].status == "fail"
    assert "npu.distribute.broadcast" in result["broadcast"].detail
    # the same update from different starts: gradients were aggregated
    assert result["allreduce"].status == "pass"


def test_different_updates_fail_allreduce():
    records = {0: rank(batch("a"), [1.0], [0.5]), 1: rank(batch("b"), [1.0], [0.9])}
    check = checks.evaluate(records, 2)["allreduce"]
    assert check.status == "fail" and "rank 1 differs from rank 0 by up to 0.4" in check.detail


def test_identical_data_makes_allreduce_not_observed_never_pass():
    records = {0: rank(batch("same"), [1.0], [0.5]), 1: rank(batch("same"), [1.0], [0.5])}
    result = checks.evaluate(records, 2)
    assert result["allreduce"].status == "not-observed"
    assert result["shard"].status == "fail"


def test_one_sample_repeated_has_nothing_to_shard_or_aggregate():
    # TensorFlow's distributed training guide: Dataset.from_tensors(([1.], [1.])).repeat(100).batch(10).
    one_row = ["r1"] * 10
    records = {rank_id: rank(dict(batch("same"), rows=one_row), [1.0], [0.5]) for rank_id in (0, 1)}
    result = checks.evaluate(records, 2)
    assert result["shard"].status == result["allreduce"].status == "not-applicable"
    assert "one sample, repeated" in result["shard"].detail
    # ... but not when the ranks' weights moved apart, nor when a batch holds distinct rows.
    records[1] = rank(dict(batch("same"), rows=one_row), [1.0], [0.9])
    assert checks.evaluate(records, 2)["allreduce"].status == "fail"
    records = {rank_id: rank(dict(batch("same"), rows=["r1", "r2"]), [1.0], [0.5]) for rank_id in (0, 1)}
    assert checks.evaluate(records, 2)["shard"].status == "fail"


def test_random_unsharded_pipeline_is_not_proof_of_sharding():
    records = {0: [batch("a", deterministic=False)], 1: [batch("b", deterministic=False)]}
    assert checks.check_shard(records, 2).status == "not-observed"
    records = {0: [batch("a", deterministic=False, sharded=True)], 1: [batch("b", deterministic=False, sharded=True)]}
    assert checks.check_shard(records, 2).status == "pass"


def test_nothing_seen_is_not_observed():
    result = checks.evaluate({0: [], 1: []}, 2)
    assert all(check.status == "not-observed" for check in result.values())


def test_one_rank_compares_nothing():
    result = checks.evaluate({0: rank(batch("a"), [1.0], [0.5])}, 1)
    assert all(check.status == "not-observed" for check in result.values())


def test_four_ranks_with_two_equal_batches_fail_shard():
    records = {r: [batch(f) ] for r, f in enumerate("aabc")}
    check = checks.check_shard(records, 4)
    assert check.status == "fail" and "ranks 0,1: a" in check.detail


def shortened(written=None, iterations=None, source="keras fit", cell=3):
    return {"kind": "shortened", "source": source, "cell": cell, "taken": 3, "written": written,
            "ran_as_written": "", "iterations": iterations, "seq": 9}


@pytest.mark.parametrize("cut", [dict(written=68), dict(iterations=34)], ids=["fit steps", "loop turns"])
def test_ranks_that_would_train_for_different_step_counts_fail_shard(cut):
    """303 rows split every N-th row give 152 and 151: with a batch of 1, rank 0 would take one more
    step and wait forever. Proof mode cut both at step 3, so their batches alone pass."""
    other = {key: value - 2 for key, value in cut.items()}
    records = {0: [batch("a"), shortened(**cut)], 1: [batch("b"), shortened(**other)]}
    check = checks.check_shard(records, 2)
    assert check.status == "fail" and "different numbers of steps" in check.detail and check.cell == 3
    records = {0: [batch("a"), shortened(**cut)], 1: [batch("b"), shortened(**cut)]}
    assert checks.check_shard(records, 2).status == "pass"


def test_step_counts_unknown_or_of_calls_that_do_not_match_say_nothing():
    records = {0: [batch("a"), shortened(68)], 1: [batch("b"), shortened(None)]}
    assert checks.check_shard(records, 2).status == "pass"
    records = {0: [batch("a"), shortened(68)], 1: [batch("b"), shortened(66, source="estimator train")]}
    assert checks.check_shard(records, 2).status == "pass"


def test_the_training_input_is_the_last_read_before_training_started():
    rank0 = [batch("peek", seq=0), batch("a", seq=1), weights("start", [1.0], 2), batch("eval", seq=3)]
    assert checks.training_input(rank0)["fingerprint"] == "a"


def test_estimator_fixes_name_the_tf1_api():
    records = {0: [weights("start", [1.0], 1, source="estimator")], 1: [weights("start", [2.0], 1, source="estimator")]}
    assert "NPUBroadcastGlobalVariablesHook" in checks.check_broadcast(records, 2).detail


def test_zero_variables_is_never_a_broadcast_pass():
    empty = {"kind": "weights", "moment": "start", "names": [], "fingerprint": "e", "samples": [], "count": 0,
             "source": "keras fit", "cell": 2, "seq": 1}
    check = checks.check_broadcast({0: [empty], 1: [dict(empty)]}, 2)
    assert check.status == "not-observed" and "no trainable variables" in check.detail


def rows_batch(rows, seq=0, deterministic=True):
    return dict(batch("".join(rows), seq=seq, deterministic=deterministic), rows=sorted(rows))


def single_card_case(n_end, one_end, n_rows=(["a", "b"], ["c", "d"]), one_rows=("a", "b", "c", "d"),
                     n_start=1.0, one_start=1.0, n_step=None, one_step=None):
    records = {r: [rows_batch(rows, seq=0), weights("start", [n_start, 2.0], 1), weights("end", [n_end, 2.0], 3)]
               for r, rows in enumerate(n_rows)}
    single = [rows_batch(list(one_rows), seq=0), weights("start", [one_start, 2.0], 1), weights("end", [one_end, 2.0], 3)]
    if n_step is not None:
        for rank_records in records.values():
            rank_records.insert(2, dict(weights("step1", [n_step, 2.0], 2)))
        single.insert(2, weights("step1", [one_step, 2.0], 2))
    return records, single


def test_single_card_math_passes_within_float_tolerance():
    records, single = single_card_case(0.5 + 1e-8, 0.5)
    check = checks.check_single_card(records, 2, single)
    assert check.status == "pass", check


def test_single_card_math_names_summed_gradients():
    records, single = single_card_case(0.0, 0.5, n_step=0.8, one_step=0.9)
    check = checks.check_single_card(records, 2, single)
    assert check.status == "fail" and "first update was 2 times one card's" in check.detail
    assert 'reduction="mean"' in check.detail


def test_single_card_math_needs_the_same_first_global_batch():
    records, single = single_card_case(0.5, 0.5, n_rows=(["a", "c"], ["e", "f"]))
    check = checks.check_single_card(records, 2, single)
    assert check.status == "not-observed" and "not the single card's first batch" in check.detail
    assert "2 in common" in check.detail


def test_single_card_math_needs_the_same_start():
    records, single = single_card_case(0.5, 0.5, one_start=3.0)
    check = checks.check_single_card(records, 2, single)
    assert check.status == "not-observed" and "did not start from rank 0's weights" in check.detail


def test_single_card_math_without_row_digests_is_not_observed():
    records, single = single_card_case(0.5, 0.5)
    single[0]["rows"] = None
    assert checks.check_single_card(records, 2, single).status == "not-observed"
    assert checks.check_single_card(records, 2, None).status == "not-observed"


def sampled(fingerprint, sample, deterministic=False, sharded=False):
    record = batch(fingerprint, deterministic=deterministic, sharded=sharded)
    record["sample"] = sample
    return record


def test_ranks_sharing_samples_fail_shard_even_when_their_shuffles_differ():
    rows = [f"row{i}" for i in range(64)]
    records = {0: [sampled("a", rows[:32] + rows[40:48])], 1: [sampled("b", rows[32:64])]}
    result = checks.check_shard(records, 2)
    assert result.status == "fail"
    assert "8 of the first 32 rows rank 1 read were also read by rank 0" in result.detail


def test_disjoint_samples_keep_the_previous_judgement():
    rows = [f"row{i}" for i in range(64)]
    sharded = {0: [sampled("a", rows[:32], sharded=True)], 1: [sampled("b", rows[32:], sharded=True)]}
    assert checks.check_shard(sharded, 2).status == "pass"
    random_unsharded = {0: [sampled("a", rows[:32])], 1: [sampled("b", rows[32:])]}
    assert checks.check_shard(random_unsharded, 2).status == "not-observed"


def test_duplicate_rows_of_arrays_do_not_fail_a_correct_shard():
    # n-grams of a song whose chorus comes twice, at an odd offset: each rank holds one copy of each.
    data = [f"ngram{i}" for i in range(250)] + [f"ngram{i}" for i in range(41, 49)]
    rank0, rank1 = data[0::2], data[1::2]
    assert len(set(rank0) & set(rank1)) == 8 and len(set(rank0)) == len(rank0)

    def arrays(fingerprint, sample):
        record = sampled(fingerprint, sample, deterministic=True, sharded=None)
        record["source"] = "keras fit arrays"
        return [record]

    assert checks.check_shard({0: arrays("a", rank0), 1: arrays("b", rank1)}, 2).status == "pass"
    # Rows a wrong slice gives both ranks: beyond what duplicates explain.
    overlapping = {0: arrays("a", data[:64]), 1: arrays("b", data[32:96])}
    assert checks.check_shard(overlapping, 2).status == "fail"
    # A dataset's sample: any row in common counts (its ranks may read the same rows in other orders).
    datasets = {0: [sampled("a", rank0, deterministic=True, sharded=True)],
                1: [sampled("b", rank1, deterministic=True, sharded=True)]}
    assert checks.check_shard(datasets, 2).status == "fail"


def test_random_draws_with_replacement_meet_by_chance_but_a_shuffle_before_the_shard_fails():
    # A generator drawing samples with replacement, sharded: two ranks' draws of 138 from 6,000 rows
    # meet about 3 times (a course notebook failed on 2), as one card's draws meet.
    rows = [f"row{i}" for i in range(400)]
    rank0, rank1 = rows[:138], rows[136:274]
    drawn = {0: [sampled("a", rank0, sharded=True)], 1: [sampled("b", rank1, sharded=True)]}
    assert checks.check_shard(drawn, 2).status == "pass"
    # The same random pipeline reading half of the other rank's rows: each shuffled before its shard.
    shuffled = {0: [sampled("a", rows[:138], sharded=True)], 1: [sampled("b", rows[69:207], sharded=True)]}
    assert checks.check_shard(shuffled, 2).status == "fail"


def test_data_whose_rows_repeat_within_a_rank_says_nothing_about_sharing():
    constant = ["zero"] * 32
    records = {0: [sampled("a", constant, sharded=True)], 1: [sampled("b", constant, sharded=True)]}
    assert checks.check_shard(records, 2).status == "pass"


def late(data, start, step1, end):
    """A rank of a custom loop whose model builds its variables on its first call, broadcast after the
    first update: start, the weights before the second update ("step1"), end."""
    return [data, weights("start", [start], 1, "optimizer step"), weights("step1", [step1], 2, "optimizer step"),
            weights("end", [end], 3, "optimizer step")]


def test_a_broadcast_after_the_first_update_passes_and_training_is_judged_from_there():
    # started apart, the same weights after the first update (rank 0's, broadcast), the same change after
    records = {0: late(batch("a"), [1.0, 2.0], [0.9, 1.9], [0.5, 1.5]),
               1: late(batch("b"), [3.0, 4.0], [0.9, 1.9], [0.5, 1.5])}
    result = checks.evaluate(records, 2)
    assert result["broadcast"].status == "pass" and "after the first update" in result["broadcast"].detail
    assert result["allreduce"].status == "pass"


def test_no_broadcast_after_the_first_update_still_fails():
    records = {0: late(batch("a"), [1.0], [0.9], [0.5]), 1: late(batch("b"), [3.0], [2.9], [2.5])}
    assert checks.evaluate(records, 2)["broadcast"].status == "fail"


def test_a_late_broadcast_does_not_hide_unaggregated_gradients():
    records = {0: late(batch("a"), [1.0], [0.9], [0.5]), 1: late(batch("b"), [3.0], [0.9], [0.7])}
    result = checks.evaluate(records, 2)
    assert result["broadcast"].status == "pass"
    assert result["allreduce"].status == "fail"


def test_starts_that_differ_only_beyond_their_samples_are_not_taken_for_a_late_broadcast():
    # the fingerprints differ but the samples do not: whether a broadcast came later cannot be told
    records = {0: late(batch("a"), [1.0], [0.9], [0.5]), 1: late(batch("b"), [1.0], [0.9], [0.5])}
    records[1][1] = dict(records[1][1], fingerprint="other")
    assert checks.evaluate(records, 2)["broadcast"].status == "fail"


def test_a_model_rebuilt_with_the_same_names_and_other_shapes_is_another_training():
    # A TF1 notebook resets its graph and builds a wider layer under the same names: the end of that
    # second training is not the first one's end; the first model's own end is.
    records = {rank: [batch(f"in{rank}"), weights("start", [[1.0, 2.0, 3.0]], 1, "optimizer step"),
                      weights("end", [[0.5, 1.5, 2.5]], 2, "optimizer step"),
                      weights("start", [[1.0] * 9], 3, "optimizer step"),
                      weights("end", [[0.5] * 9], 4, "optimizer step")] for rank in range(2)}
    assert checks.check_allreduce(records, 2).status == "pass"


def named(record, names, shapes_of=None):
    return {**record, "names": names}


def test_two_models_started_in_one_step_are_compared_model_by_model_whatever_order_each_rank_saw():
    """A GAN's step updates the generator and the discriminator in one tf.function: the graph does not
    order the two apply_gradients, so rank 1 may see the discriminator start first. Each is compared
    with itself: a broadcast of both passes, and the updates, alike, pass."""
    def gan_rank(data, first, second):
        generator = [named(weights("start", [1.0, 2.0], 0, "optimizer step", 27), ["g:0"]),
                     named(weights("end", [0.5, 1.5], 0, "optimizer step", 27), ["g:0"])]
        discriminator = [named(weights("start", [3.0], 0, "optimizer step", 27), ["d:0"]),
                         named(weights("end", [2.0], 0, "optimizer step", 27), ["d:0"])]
        models = {"g": generator, "d": discriminator}
        ordered = [data, models[first][0], models[second][0], models[first][1], models[second][1]]
        return [{**record, "seq": seq} for seq, record in enumerate(ordered)]

    records = {0: gan_rank(batch("a"), "g", "d"), 1: gan_rank(batch("b"), "d", "g")}
    result = checks.evaluate(records, 2)
    assert {name: c.status for name, c in result.items()} == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}
    assert "2 trainable variables" in result["broadcast"].detail  # the generator's, on both ranks
    # ... and a discriminator rank 1 did not get from rank 0 still fails, in either order
    records[1][1] = {**records[1][1], "fingerprint": "other"}
    assert checks.evaluate(records, 2)["broadcast"].status == "fail"
