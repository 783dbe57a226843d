"""Does the student's own level say how much the recommendation will realise? A descriptive exploration (committed
before it ran; it chooses and fits nothing).

explore_recommended_size.py found that the recommended row's predicted gain ranks what it realised, across worlds, at
-0.46: the largest predictions (G +0.55 to +0.88) went to worlds where training realised about nothing. A gap that large
means a student that solves little on its own; on-policy distillation trains on the student's own rollouts, so a
student that rarely gets near an answer may give the teacher little to correct. This reads, per world, the
recommended row (as explore_recommended_size picks it) beside the student's own level and the gap relative to it:
- ``student_heldout``: the initial student's held-out pass@1 (the study's evaluation, every world; a diagnosis has the
  same student's accuracy on its own prompts, ``student_diag`` below, which it estimates);
- ``pass4_minus_pass1``: the initial student's held-out pass@4 minus pass@1 (correct answers it reaches only
  sometimes);
- ``student_diag``, ``teacher_diag``: the student's and the recommended configuration's teacher's success rates on the
  diagnosis prompts (handoff_rows.json: the worlds whose build is in the repository);
- ``gap_over_room``: G / (1 - student_diag), the share of what the student misses that the teacher gets;
- ``handoff``, ``handoff_share``: the handoff gap (explore_handoff.py) and handoff / G;
- ``accuracy_gap`` and the predicted gain, for reference.
Per column: the Spearman with the realised Δpass@1 across the worlds the first look never fitted on (and across all),
and the AUROC of the column for "realised below +0.02" (0.5: no information; the column's low values flagging it).

Reading of its output (explore_size_floor.txt): no. Five of the seven never-fitted worlds where the recommendation
realised about nothing have a weak student (held-out pass@1 0.12 to 0.23; the other two, crossed and hearth, a strong
one and an answer-only self-teacher), but so do relay, tandem and tallow, which realised +0.70 or more: across the 28 never-fitted worlds the student's held-out pass@1 ranks the realised size at +0.18 (AUROC
0.78 for "about nothing"), its diagnosis accuracy at -0.07, and G relative to the room (G / (1 - student)) at -0.49, as
wrong as G. The handoff stays the best of these columns (+0.39, AUROC 0.85 over 21 worlds). A weak student is where
the size is uncertain, not where it is small.

    python benchmarks/validity/v2/explore_size_floor.py > benchmarks/validity/v2/explore_size_floor.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import explore_handoff as handoff  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2.looks import model_file  # noqa: E402
from benchmarks.validity.v2.explore_recommended_size import SMALL, recommended_rows  # noqa: E402

COLUMNS = ("predicted", "accuracy_gap", "student_heldout", "pass4_minus_pass1", "student_diag", "teacher_diag",
           "gap_over_room", "handoff", "handoff_share")


def initial(world: str) -> dict:
    """The initial student's held-out evaluation in the world's committed study analysis."""
    return look2._analysis(look2.ANALYSES.get(world, look2.SEVEN))["worlds"][world]["initial"]


def table() -> dict[str, dict]:
    """Per world: the recommended row's realised Δpass@1 and every column (NaN where not measured)."""
    hand = json.loads(handoff.KEPT.read_text())
    shipped = model_file(16)
    out = {}
    for w, rec in recommended_rows(shipped).items():
        ini = initial(w)
        src = rec["source"]
        h = handoff.config_row(hand, w, src)
        s, t = h.get("student", np.nan), h.get("teacher", np.nan)
        g = rec["accuracy_gap"]
        out[w] = {"row": rec["row"], "realised": rec["realised"], "predicted": rec["predicted"], "accuracy_gap": g,
                  "student_heldout": ini["pass@1"]["estimate"],
                  "pass4_minus_pass1": ini["pass@4"]["estimate"] - ini["pass@1"]["estimate"],
                  "student_diag": s, "teacher_diag": t, "gap_over_room": g / (1 - s) if s < 1 else np.nan,
                  "handoff": h.get("handoff", np.nan), "handoff_share": h.get("handoff", np.nan) / g,
                  "fitted": w in look8.FITTED}
    return out


def auroc(score: np.ndarray, flagged: np.ndarray) -> float:
    """P(a flagged world's score < an unflagged world's), ties counted half (low values flag): the Mann-Whitney U of
    the unflagged scores over the flagged ones, divided by the number of pairs."""
    a, b = score[flagged], score[~flagged]
    if not len(a) or not len(b):
        return float("nan")
    return float(mannwhitneyu(b, a).statistic / (len(a) * len(b)))


def size_figures(picked: dict[str, dict], names: list[str], columns) -> dict[str, dict]:
    """Per column, across ``names``: the recommended row's column (``picked[world]``) against what it realised
    (Spearman over the worlds where it is measured, and the AUROC for realised < SMALL, low values flagging)."""
    out = {}
    for c in columns:
        x, y = np.array([(picked[w][c], picked[w]["realised"]) for w in names if w in picked], dtype=float).T
        k = np.isfinite(x)
        out[c] = {"spearman": stats.spearman(x[k], y[k]), "auroc": auroc(x[k], y[k] < SMALL), "n": int(k.sum()),
                  "small": int((y[k] < SMALL).sum())}
    return out


def size_rule(size: dict[str, dict]) -> bool:
    """explore_coherence's and explore_early_read's rule for a look on a size statement (their docstrings)."""
    return any(s["spearman"] >= 0.5 and s["auroc"] >= 0.85 for s in size.values())


def size_lines(size: dict[str, dict]) -> list[str]:
    """``size_figures`` of the never-fitted worlds as lines."""
    lines = ["", "the recommended row across the never-fitted worlds: Spearman with what it realised, AUROC for "
             f"realised < {SMALL:+.2f} (low values flag)"]
    return lines + [f"  {c:10s} Spearman {s['spearman']:+.2f}  AUROC {s['auroc']:.2f}  (n = {s['n']}, {s['small']} below)"
                    for c, s in size.items()]


def across_worlds(rows: dict[str, dict], columns) -> list[str]:
    """Per column, over the never-fitted worlds and over all: ``size_figures`` as lines."""
    lines = []
    for label, keep in (("never fitted", lambda r: not r["fitted"]), ("all", lambda r: True)):
        names = [w for w, r in rows.items() if keep(r)]
        small = sum(rows[w]["realised"] < SMALL for w in names)
        lines += ["", f"{label} ({len(names)} worlds): Spearman with what the recommended row realised, and AUROC for "
                  f"realised < {SMALL:+.2f} ({small} worlds; low values flag)"]
        lines += [f"  {c:<20} Spearman {d['spearman']:+.2f}  AUROC {d['auroc']:.2f}  (n = {d['n']})"
                  for c, d in size_figures(rows, names, columns).items()]
    return lines


def render(rows: dict[str, dict]) -> str:
    lines = ["Per world: the recommended row, what it realised, and the student's own level (* the shipped models were "
             "fitted on it)", "", f"{'world':<20}{'row':<22}{'realised':>9}" + "".join(f"{c[:12]:>13}" for c in COLUMNS)]
    for w, r in rows.items():
        lines.append(f"{w + (' *' if r['fitted'] else ''):<20}{r['row']:<22}{r['realised']:>+9.3f}"
                     + "".join(f"{r[c]:>+13.3f}" for c in COLUMNS))
    return "\n".join(lines + across_worlds(rows, COLUMNS))

if __name__ == "__main__":
    print(render(table()))
