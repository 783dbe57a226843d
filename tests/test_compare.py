"""The cross-machine comparisons themselves (tests/compare.py): float noise passes, real changes fail."""

import numpy as np
import pandas as pd
import pytest
from compare import assert_frames_close, ranking_mismatch, text_close


def entry(config, signal, score, verdict="unclear"):
    return {"config": config, "signal": signal, "verdict": verdict, "score": score}


OLD = [entry("teacher", "rev_kl", 0.0371860), entry("teacher", "a_ex", 0.03712564089321325),
       entry("teacher", "r_opd", 0.03712564089321324), entry("self", "jsd", 0.0033416)]


def test_a_swap_of_tied_scores_passes():
    new = [OLD[0], OLD[2], OLD[1], OLD[3]]  # the AMD machine's order: a_ex and r_opd trade places
    assert ranking_mismatch(OLD, new) is None
    moved = [dict(e, score=e["score"] * (1 + 3e-6)) for e in OLD]  # every score moved by float32 noise
    assert ranking_mismatch(OLD, moved) is None


def test_a_swap_beyond_the_tolerance_fails():
    new = [OLD[1], OLD[0], OLD[2], OLD[3]]  # 0.03719 vs 0.03713: 1.6e-3 relative apart, not a tie
    assert "swapped" in ranking_mismatch(OLD, new)
    far = [OLD[3], OLD[1], OLD[2], OLD[0]]
    assert "swapped" in ranking_mismatch(OLD, far)


def test_a_changed_verdict_score_or_entry_fails():
    assert "verdict" in ranking_mismatch(OLD, [dict(OLD[0], verdict="helps"), *OLD[1:]])
    assert "score" in ranking_mismatch(OLD, [dict(OLD[0], score=0.04), *OLD[1:]])
    assert "different entries" in ranking_mismatch(OLD, [*OLD[:3], entry("self", "fwd_kl", 0.0033416)])
    tied_other_verdict = [entry("a", "x", 0.1, "helps"), entry("b", "x", 0.1, "unclear")]
    assert "swapped" in ranking_mismatch(tied_other_verdict, tied_other_verdict[::-1])


def test_list_cells_compare_element_by_element():
    old = pd.DataFrame({"p": [np.array([4.68191945e-01, 5.3e-01])], "ids": [np.array([24, 18])], "x": [1.0]})
    noise = pd.DataFrame({"p": [np.array([4.68191232e-01, 5.3e-01])], "ids": [np.array([24, 18])], "x": [1.0]})
    assert_frames_close(old, noise)  # the AMD machine's p_tilde: equal to float32 tolerance
    for bad in ({"p": [np.array([4.7e-01, 5.3e-01])]}, {"ids": [np.array([24, 19])]}, {"p": [np.array([0.468])]},
                {"x": [1.01]}):
        with pytest.raises(AssertionError):
            assert_frames_close(old, noise.assign(**bad))


def test_numbers_in_text_compare_to_their_printed_precision():
    assert text_close("accuracy gap 0.0345, alignment -1.2e-03", "accuracy gap 0.0346, alignment -1.3e-03")
    assert not text_close("accuracy gap 0.0345", "accuracy gap 0.0347")
    assert not text_close("teacher advantage 0.1", "alignment 0.1")
    assert not text_close("n = 12 nodes", "n = 13 nodes")


def test_topk_ids_may_trade_places_only_when_tied():
    from compare import assert_topk_close

    vals, ids = np.array([[-0.1, -2.0, -2.0000001, -5.0]]), np.array([[3, 7, 9, 1]])
    assert_topk_close(vals, ids, vals, np.array([[3, 9, 7, 1]]))  # 7 and 9 tie
    assert_topk_close(vals[:, :3], ids[:, :3], vals[:, :3], np.array([[3, 7, 4]]), atol=1e-6)  # a tie at the k-th
    with pytest.raises(AssertionError):
        assert_topk_close(vals, ids, vals, np.array([[7, 3, 9, 1]]))  # 3 (-0.1) and 7 (-2.0) are not tied
    with pytest.raises(AssertionError):
        assert_topk_close(vals, ids, vals, np.array([[3, 7, 2, 1]]))  # a new id above the k-th value


def test_the_golden_comparison_accepts_what_another_cpu_produced():
    """The two differences an AMD EPYC (AVX-512) produced on the golden config (issue 18): p_tilde
    moved by float32 noise, and a_ex / r_opd of `teacher` (scores 1e-17 apart) in the other order."""
    import json

    from test_golden import GOLDEN, _walk, compare_table

    nodes = pd.read_parquet(GOLDEN / "nodes.parquet")
    assert nodes["p_tilde"].iloc[0][0] == pytest.approx(4.68191945e-01)
    other = nodes.assign(p_tilde=[p * (1 - 1.5e-6) for p in nodes["p_tilde"]])
    other.at[0, "p_tilde"] = np.array([4.68191232e-01, *nodes["p_tilde"].iloc[0][1:]])
    compare_table("nodes", nodes, other)
    with pytest.raises(AssertionError):
        compare_table("nodes", nodes, nodes.assign(p_tilde=[p * 1.01 for p in nodes["p_tilde"]]))

    old = json.loads((GOLDEN / "summary.json").read_text())
    r = [dict(e) for e in old["ranking"]]
    assert (r[9]["signal"], r[10]["signal"]) == ("a_ex", "r_opd")
    r[9], r[10] = r[10], r[9]
    _walk(old["ranking"], r, ".ranking")
    r[0], r[6] = r[6], r[0]  # self_full_solution/fwd_kl (0.0385) behind teacher/rev_kl (0.0372): a real reorder
    with pytest.raises(AssertionError, match="swapped"):
        _walk(old["ranking"], r, ".ranking")
