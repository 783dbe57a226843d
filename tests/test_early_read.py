"""The early read of a training run (opsd_diag.early_read): which evaluation it reads, the change against an explicit
per-problem loop, its wording, and every record or step count it must refuse to read."""

import copy
import math

import pytest

from opsd_diag import early_read, model_file

FIGURES = {"fraction": 0.25, "threshold": 0.02, "steps": [10, 40], "runs": 286, "worlds": 30, "spearman": 0.82,
           "auroc": 0.93, "low": {"runs": 137, "realised_below": 101}, "high": {"runs": 149, "realised_at_least": 141}}


def _eval(step: int, correct: list[int], n: int = 4) -> dict:
    return {"kind": "eval", "step": step, "pass@1": sum(correct) / (n * len(correct)),
            "per_problem": [[i, n, c] for i, c in enumerate(correct)]}


def _reference(start: list[int], at: list[int], n: int = 4) -> float:
    total = 0.0
    for a, b in zip(start, at):
        total += b / n - a / n
    return total / len(start)


def test_it_reads_the_first_evaluation_at_or_after_a_quarter_paired_over_problems():
    start, early, later = [0, 1, 2, 4, 3], [1, 1, 3, 4, 4], [4, 4, 4, 4, 4]
    records = [_eval(0, start), {"kind": "train", "step": 1, "loss": 1.0}, _eval(5, [0, 0, 0, 0, 0]),
               _eval(12, early), _eval(20, later), _eval(40, later)]
    r = early_read.read(records, 40, FIGURES)
    assert r["step"] == 12 and r["problems"] == 5  # ceil(0.25 x 40) = 10: step 5 is too early, 12 the first after
    assert r["change"] == pytest.approx(_reference(start, early), abs=1e-12)
    assert r["lo"] <= r["change"] <= r["hi"] and not r["low"]
    assert r["text"].startswith(f"Early read at step 12 of 40: held-out pass@1 {r['change']:+.3f} [")
    assert "141 of 149 realised at least +0.02" in r["text"] and "286 runs over 30 tiny worlds" in r["text"]


def test_a_low_read_is_flagged_and_advises_stopping_only_while_the_run_runs():
    records = [_eval(0, [2, 2, 2]), _eval(10, [2, 2, 2])]
    r = early_read.read(records, 40, FIGURES)
    assert r["change"] == 0.0 and r["low"]
    assert "101 of 137 realised below +0.02" in r["text"] and "stopping it now saves" in r["text"]
    assert "stopping" not in early_read.read(records, 40, FIGURES, running=False)["text"]
    at_threshold = [_eval(0, [0] * 50, 1), _eval(10, [1] + [0] * 49, 1)]  # +0.02 exactly: not below
    assert not early_read.read(at_threshold, 40, FIGURES)["low"]


def test_without_per_problem_counts_it_reads_the_change_of_the_means_without_an_interval():
    records = [{"kind": "eval", "step": 0, "pass@1": 0.25}, {"kind": "eval", "step": 10, "pass@1": 0.5}]
    r = early_read.read(records, 40, FIGURES)
    assert r["change"] == pytest.approx(0.25) and r["problems"] == 0 and math.isnan(r["lo"])
    assert "+0.250 since the start" in r["text"] and "[" not in r["text"].split("since")[0]


@pytest.mark.parametrize("records, max_steps", [
    ([_eval(10, [1])], 40),                                      # no evaluation at the start
    ([_eval(0, [1]), _eval(9, [2])], 40),                         # none yet at a quarter
    ([_eval(0, [1]), _eval(40, [2])], 40),                        # only the last step's: that is the end, not a read
    ([_eval(0, [1]), _eval(10, [2])], 0),
    ([_eval(0, [1]), _eval(10, [2])], True),                      # a bool is no step count
    ([_eval(0, [1]), _eval(10, [2])], "40"),
    ([_eval(0, [1]), {**_eval(10, [2]), "pass@1": "0.5"}], 40),   # damaged records are skipped, never read
    ([_eval(0, [1]), {**_eval(10, [2]), "pass@1": 1.5}], 40),
    ([_eval(0, [1]), {**_eval(10, [2]), "step": -10}], 40),
    ([_eval(0, [1]), {**_eval(10, [2]), "step": 10.0}], 40),
    ([_eval(0, [1]), {**_eval(10, [2]), "kind": "train"}], 40),
    ([_eval(0, [1]), "not a record", None], 40),
])
def test_no_read_where_there_is_none_or_the_records_are_damaged(records, max_steps):
    assert early_read.read(records, max_steps, FIGURES) is None


def test_the_model_file_record_is_checked_and_optional():
    """The shipped file holds the record exactly when explore_early_success's rules say so (its --check, in
    test_v2_explorations); here: a file with a good record parses, a bad one is refused naming it, and none is None."""
    import json
    from importlib import resources

    d = json.loads((resources.files("opsd_diag") / "data" / model_file.SHIPPED).read_text())
    d["early_read"] = copy.deepcopy(FIGURES)
    assert model_file.parse(d, "test").early_read == FIGURES
    assert early_read.read([_eval(0, [1]), _eval(10, [3])], 40, model_file.parse(d, "test").early_read)["text"]
    for bad in ({"fraction": 0}, {"steps": [10]}, {"runs": True}, {"low": {"runs": 1}}, {"spearman": float("nan")}):
        broken = copy.deepcopy(d)
        broken["early_read"].update(bad)
        with pytest.raises(ValueError, match="early_read"):
            model_file.parse(broken, "test")
    del d["early_read"]
    assert model_file.parse(d, "test").early_read is None  # a user's calibration, or a withdrawn read
