"""Does asking the lookahead to have moved the student make the G `hurts` call precise? An exploration on the 51 worlds
with committed rows (committed before it ran; its pick, stated here, is mechanical, and a look may take it only if
judged on worlds built after that look's plan).

explore_hurts_misses.txt found that the fourteenth look's candidate B (hurts where G <= -0.2 for a full-distribution
loss) missed mostly where the lookahead had barely moved the student. Here B is filtered by the lookahead KL, two ways:
- relative (scale-free, what a user's diagnosis of Qwen- or Llama-size models can use): the row's lookahead KL is at
  least the q-quantile of the lookahead KL over the rows of its own diagnosis (world), q in QUANTILES;
- absolute: the row's lookahead KL is at least tau, tau in TAUS (a toy world's scale; reported for comparison).
A row without a lookahead result is never called. For each setting: calls, hurts precision and the unclear share on the
21 worlds that chose B, the 28 that judged it, topaz and onyx, and all 51.

The pick (stated before it ran): per family, the smallest setting whose hurts precision pooled over the 51 worlds is
>= 0.95 with at least 60 calls there; a family with no such setting gives no candidate.

    python benchmarks/validity/v2/explore_hurts_moved.py > benchmarks/validity/v2/explore_hurts_moved.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look14 as look14  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS as CHOSE  # noqa: E402
from benchmarks.validity.v2.report_look4 import scored  # noqa: E402

QUANTILES = (0.1, 0.25, 0.4, 0.5, 0.6, 0.75)
TAUS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.03, 0.05)
MIN_PRECISION, MIN_CALLS = 0.95, 60


def moved(rows: list[dict], family: str, x: float) -> np.ndarray:
    """[n] bool: the row's lookahead KL clears the setting (a row without one never does)."""
    kl = np.array([v2._num(r["lookahead_kl"]) for r in rows])
    if family == "absolute":
        return np.isfinite(kl) & (kl >= x)
    w = np.array([r["world"] for r in rows])
    floor = {k: np.nanquantile(kl[w == k], x) if np.isfinite(kl[w == k]).any() else np.inf for k in set(w)}
    return np.isfinite(kl) & (kl >= np.array([floor[k] for k in w]))


def table(rows: list[dict]) -> tuple[list[str], dict]:
    w = np.array([r["world"] for r in rows])
    judged = look14.plan()["worlds"]["judged"]
    scopes = {"chose (21)": np.isin(w, CHOSE), "judged (28)": np.isin(w, judged),
              "topaz+onyx": np.isin(w, ["topaz", "onyx"]), "all 51": np.ones(len(rows), bool)}
    b = look14.g_verdicts(rows, look14.candidates()["g_hurts"])
    settings = [("none", None, "none (B)")] + [("relative", q, f"q={q}") for q in QUANTILES] + \
               [("absolute", t, f"tau={t}") for t in TAUS]
    lines = [f"{'setting':<16}" + "".join(f"{s:>30}" for s in scopes), f"{'':<16}" + "   calls  precision  unclear" * 4]
    found: dict = {}
    for family, x, label in settings:
        keep = np.ones(len(rows), bool) if x is None else moved(rows, family, x)
        vs = [v if k else "unclear" for v, k in zip(b, keep)]
        cells = []
        for name, s in scopes.items():
            d = scored([v for v, k in zip(vs, s) if k], [r for r, k in zip(rows, s) if k])
            cells.append(f"{d['n_hurts']:>8}{d['hurts_precision']:>11.3f}{d['unclear_share']:>9.0%}  ")
            if name == "all 51" and x is not None and family not in found and d["n_hurts"] >= MIN_CALLS \
                    and d["hurts_precision"] >= MIN_PRECISION:
                found[family] = {"setting": x, "calls": d["n_hurts"], "precision": d["hurts_precision"]}
        lines.append(f"{label:<16}" + "".join(cells))
    return lines, found


def main() -> None:
    worlds = [*CHOSE, *look14.plan()["worlds"]["judged"], *look14.added_worlds()[1]]
    rows = look2.load_rows({"worlds": worlds})
    lines, found = table(rows)
    print(f"B (hurts where G <= -0.2 for a full-distribution loss) filtered by the lookahead KL, {len(set(worlds))} "
          f"worlds, {len(rows)} rows; a cell: hurts calls, hurts precision, unclear share\n")
    print("\n".join(lines))
    print(f"\npick (smallest setting with precision >= {MIN_PRECISION} on all 51 and >= {MIN_CALLS} calls):")
    for family in ("relative", "absolute"):
        f = found.get(family)
        print(f"  {family}: " + (f"{f['setting']} ({f['calls']} calls, precision {f['precision']:.3f})" if f
                                 else "none"))


if __name__ == "__main__":
    main()
