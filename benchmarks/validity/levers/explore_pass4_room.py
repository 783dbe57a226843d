"""How much room does `diversity` leave for target 1? A bound on every lever setting, not a look at one (committed
before it ran; it chooses nothing).

Target 1 asks for a setting whose Δpass@1 is at least all-token training's and whose paired Δpass@4 - all's interval
lies above 0 (``rows.keeps_pass4``: a percentile bootstrap over the 48 held-out problems). No setting can raise a
problem's pass@4 above 1, so per problem the most any setting can add to all-token training's pass@4 is
``1 - pass@4(all)`` (its final evaluation, averaged over the seeds). That vector is the best case of every setting at
once; if even its interval's lower end is 0, target 1 cannot be met in this world on these seeds, whatever a lever
does.

Measured on all-token training run again as the study runs it (``run_levers.py --settings all``: the first look's
seeds 0 and 1, and the ninth look's 2 to 5, out DIR and DIR9), whose Δpass@1 and Δpass@4 must reproduce the committed
ones (levers_analysis.json) within 0.011. Per look: the problems with room, the room's total, and the best case's
interval at the level the look judged (95%; the ninth look 97.5%).

    python benchmarks/validity/levers/run_levers.py --out DIR --worlds diversity --settings all --seeds 0,1
    python benchmarks/validity/levers/run_levers.py --look 9 --out DIR9 --settings all
    python benchmarks/validity/levers/explore_pass4_room.py --keep DIR DIR9      # pass4_room.json
    python benchmarks/validity/levers/explore_pass4_room.py > benchmarks/validity/levers/explore_pass4_room.txt
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.levers import rows  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "pass4_room.json"
LOOKS = {"first": {"seeds": [0, 1], "level": 0.95}, "ninth": {"seeds": [2, 3, 4, 5], "level": 0.975}}


def per_problem_all(root: Path, seeds: list[int]) -> dict:
    """All-token training in diversity: per problem the initial and final pass@1 and pass@4 (seed means)."""
    runs = root / "diversity" / "runs"
    _, first = rows._records(runs / f"all__s{seeds[0]}")
    initial = next(e for e in first if e["step"] == 0)
    finals = [max(rows._records(runs / f"all__s{s}")[1], key=lambda e: e["step"]) for s in seeds]
    out = {}
    for k in (1, 4):
        init = rows.per_problem(initial, k)
        out[f"initial_pass@{k}"] = [init[i] for i in sorted(init)]
        out[f"final_pass@{k}"] = [float(np.mean([rows.per_problem(f, k)[i] for f in finals])) for i in sorted(init)]
    return out


def keep(root: Path, root9: Path) -> None:
    kept = {look: {"seeds": s["seeds"], **per_problem_all(r, s["seeds"])}
            for (look, s), r in zip(LOOKS.items(), (root, root9))}
    KEPT.write_text(json.dumps(kept, indent=1) + "\n")


def room(look: dict, level: float) -> dict:
    """The best case of every setting: per problem 1 - pass@4(all), and its interval at ``level``."""
    final4, init1, final1 = (np.array(look[k]) for k in ("final_pass@4", "initial_pass@1", "final_pass@1"))
    best = 1.0 - final4
    return {"d_pass1_all": float((final1 - init1).mean()),
            "d_pass4_all": float((final4 - np.array(look["initial_pass@4"])).mean()),
            "pass4_all": float(final4.mean()), "problems": len(best), "with_room": int((best > 1e-12).sum()),
            "room_total": float(best.sum()), "best_case": rows.boot(best, level)}


def report() -> dict:
    kept = json.loads(KEPT.read_text())
    committed = json.loads((HERE / "levers_analysis.json").read_text())
    study = {"first": committed["worlds"]["diversity"]["settings"]["all"],
             "ninth": committed["ninth_look"]["rows"]["settings"]["all"]}
    out = {}
    for look, s in LOOKS.items():
        r = room(kept[look], s["level"])
        r["committed"] = {k: study[look][k]["estimate"] for k in ("d_pass1", "d_pass4")}
        r["reproduced"] = bool(abs(r["d_pass1_all"] - r["committed"]["d_pass1"]) <= 0.011
                               and abs(r["d_pass4_all"] - r["committed"]["d_pass4"]) <= 0.011)
        r["attainable"] = r["best_case"]["lo"] > 0
        out[look] = {"seeds": s["seeds"], "level": s["level"], **r}
    return out


def render(res: dict) -> str:
    lines = ["Target 1's room in diversity: the most any lever setting can add to all-token training's pass@4, per "
             "held-out problem (1 - its pass@4 after all-token training, seed mean)", ""]
    for look, r in res.items():
        b = r["best_case"]
        lines += [f"{look} look (seeds {', '.join(map(str, r['seeds']))}): all-token training rerun: Δpass@1 "
                  f"{r['d_pass1_all']:+.3f}, Δpass@4 {r['d_pass4_all']:+.3f} (committed {r['committed']['d_pass1']:+.3f}, "
                  f"{r['committed']['d_pass4']:+.3f}: {'reproduced' if r['reproduced'] else 'NOT reproduced'}); "
                  f"its pass@4 {r['pass4_all']:.3f}",
                  f"  problems with room: {r['with_room']} of {r['problems']}, room in all {r['room_total']:.3f} "
                  f"problems; the best case of every setting: Δpass@4 - all's {b['estimate']:+.3f} "
                  f"[{b['lo']:+.3f}, {b['hi']:+.3f}] at {100 * r['level']:g}%: target 1 "
                  f"{'attainable' if r['attainable'] else 'cannot be met, whatever a setting does'}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--keep"]:
        keep(Path(argv[1]), Path(argv[2]))
    else:
        print(render(report()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
