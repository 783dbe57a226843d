"""Where does the recommendation miss? A descriptive exploration (it chooses and fits nothing), written after
CHECKS.md showed the recommended row far below each world's best in a few worlds (gypsum, danburite, tuff, benitoite).

Per world built after the ranking shipped and checked (CHECKS.md's worlds, each with the model file as it stood when
it was checked): the recommended row (the best-ranked with G > 0) with its configuration, G, predicted gain, the
lookahead columns, what it realised and its place among the world's rows; then, per teacher configuration name, how
often it was recommended and where its recommendations landed, beside how its rows did wherever it appears (its best
method's realised Δpass@1, its G). Every world here was already read, so this can suggest a candidate, never judge one:
a rule taken from it must be judged on worlds built after its plan.

Reading of its output (explore_recommended_miss.txt): the recommendation missed where it picked a self-teacher shown
less than the full solution. Picked 5 times, `self_answer` (the final answer only) landed 11th to 18th every time and
realised below +0.01 in all five (gypsum -0.443); `self_partial50` (half the solution) 5th to 12th in 4 of 4. Where
the recommendation was `self_full` or the external `teacher` it landed in the top five in all but two worlds. Nothing
in the lookahead columns marks those rows: their lookahead values are as small as the good picks'. G is high for an
answer-only teacher because the answer alone makes it right, not because its tokens along the way would teach the
student. A candidate for a later look: a diagnosis column that tells whether a teacher's lead comes from the answer
or from the steps (for instance the share of the teacher-student divergence on the final-answer tokens).

    python benchmarks/validity/v2/explore_recommended_miss.py > benchmarks/validity/v2/explore_recommended_miss.txt
"""
from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_checks as rc  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import product_gain, product_order  # noqa: E402

COLUMNS = ("lookahead_dv", "lookahead_dll", "lookahead_kl", "teachability", "mean_jsd")


def worlds() -> list[str]:
    """The 87 worlds checked when this was written: the plan's worlds up to amendment 49's last, and wick."""
    planned = rc.since_look8()
    return [w for w in [*planned[:planned.index("smithsonite") + 1], "wick"] if rc.status(w) == "checked"]


def world_rows() -> dict[str, list[dict]]:
    return {w: rc.rows_of(w) for w in worlds()}


def recommended(w: str, rows: list[dict]) -> dict:
    gain = product_gain(rows, rc.as_checked(w))
    order = product_order(rows, gain, rc.LATER)
    g = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    y = v2.target(rows, "d_pass1")
    k = np.flatnonzero(g > 0)
    i = int(k[np.argmax(order[k])])
    return {"config": rows[i]["config"], "method": rows[i]["method"], "g": float(g[i]), "predicted": float(gain[i]),
            **{c: v2._num(rows[i].get(c)) for c in COLUMNS}, "realised": float(y[i]), "best": float(np.nanmax(y)),
            "place": int((y > y[i]).sum()) + 1, "n": len(rows)}


def by_config(all_rows: dict[str, list[dict]]) -> dict[str, dict]:
    """Per configuration name, over the worlds it appears in: its best method's realised Δpass@1 and its G."""
    out = defaultdict(lambda: {"best": [], "g": []})
    for rows in all_rows.values():
        for c in dict.fromkeys(r["config"] for r in rows):
            mine = [r for r in rows if r["config"] == c]
            out[c]["best"].append(float(np.nanmax(v2.target(mine, "d_pass1"))))
            out[c]["g"].append(v2._num(mine[0]["accuracy_gap"]))
    return out


def report() -> tuple[dict[str, dict], dict[str, dict]]:
    """(world -> its recommended row, configuration name -> its rows' best realised and G)."""
    all_rows = world_rows()
    return {w: recommended(w, rows) for w, rows in all_rows.items()}, by_config(all_rows)


def main() -> None:
    rec, cfg = report()
    print(f"{'world':12} {'config':16} {'method':9} {'G':>6} {'pred':>6} " + " ".join(f"{c[:9]:>9}" for c in COLUMNS)
          + f" {'real':>6} {'best':>6} place")
    for w, r in rec.items():
        print(f"{w:12} {r['config']:16} {r['method']:9} {r['g']:+6.3f} {r['predicted']:+6.3f} "
              + " ".join(f"{r[c]:+9.3f}" for c in COLUMNS) + f" {r['realised']:+6.3f} {r['best']:+6.3f} "
              f"{r['place']} of {r['n']}")
    print("\nper configuration: recommended (worlds; places; realised below +0.01), and wherever it appears (worlds; "
          "mean G; mean realised Δpass@1 of its best method)")
    for c in sorted(cfg, key=lambda c: -len(cfg[c]["g"])):
        picks = [r for r in rec.values() if r["config"] == c]
        places = ", ".join(str(p["place"]) for p in picks) or "-"
        small = sum(p["realised"] < 0.01 for p in picks)
        print(f"  {c:18} recommended {len(picks):2d} (places {places}; below +0.01: {small}); appears in "
              f"{len(cfg[c]['g'])} worlds, mean G {np.nanmean(cfg[c]['g']):+.3f}, mean best realised "
              f"{np.nanmean(cfg[c]['best']):+.3f}")


if __name__ == "__main__":
    main()
