"""An exploration on the twenty-one worlds seen so far (it chose nothing; no look was built on it): where a configuration
with G > 0.1 trains well with a full-distribution loss and not with a sampled-token one (tandem's teacher +0.739
against +0.028), does any diagnosis column say so? Spearman of each column with the realised gap (jsd or opsd_jsd
minus opd or opsd_opd) over those configurations, and, per loss family, with the realised Δpass@1 over rows with
G > 0.1 (pooled over worlds).

    python benchmarks/validity/v2/explore_method_gap.py > benchmarks/validity/v2/explore_method_gap.txt
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity import stats  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402

COLUMNS = ("accuracy_gap", "mean_jsd", "mean_rev_kl", "teachability", "topk_overlap", "high_entropy_student",
           "high_entropy_teacher", "opd2_sign_agreement", "alignment", "teacher_advantage", "lookahead_dv",
           "lookahead_dll", "lookahead_kl", "lookahead_fresh")


def value(r: dict, k: str) -> float:
    v = r.get(k)
    return np.nan if isinstance(v, dict) else v2._num(v)


def rho(x: list[float], y: list[float]) -> str:
    x, y = np.asarray(x, float), np.asarray(y, float)
    m = np.isfinite(x) & np.isfinite(y)
    return f"{stats.spearman(x[m], y[m]):+.2f} (n={m.sum()})" if m.sum() >= 5 else "n/a"


def main() -> int:
    rows = look2.load_rows({"worlds": WORLDS})
    extra = {(r["world"], r["config"], r["method"]): r for w in WORLDS for r in
             ({**x, "world": w} for x in look2.world_rows(w))}  # columns load_rows leaves out
    rows = [{**extra[(r["world"], r["config"], r["method"])], **r} for r in rows]
    pairs = []
    for key in sorted({(r["world"], r["config"]) for r in rows}):
        ms = {r["method"]: r for r in rows if (r["world"], r["config"]) == key}
        full = next((ms[m] for m in ("jsd", "opsd_jsd") if m in ms), None)
        sampled = next((ms[m] for m in ("opd", "opsd_opd") if m in ms), None)
        if full and sampled and v2._num(full["accuracy_gap"]) > 0.1:
            pairs.append((full, sampled))
    gap = [f["d_pass1"]["estimate"] - s["d_pass1"]["estimate"] for f, s in pairs]
    print(f"{len(pairs)} configurations with G > 0.1 and both loss families, over {len(WORLDS)} worlds")
    print("Spearman with the realised gap (full-distribution minus sampled-token Δpass@1), the column of the config:")
    for k in COLUMNS[:10]:
        print(f"  {k:22s} {rho([value(f, k) for f, _ in pairs], gap)}")
    for family, methods in (("sampled-token", ("opd", "opsd_opd", "exopd", "opd2")), ("full-distribution",
                                                                                         ("jsd", "opsd_jsd"))):
        sub = [r for r in rows if r["method"] in methods and v2._num(r["accuracy_gap"]) > 0.1]
        y = [r["d_pass1"]["estimate"] for r in sub]
        print(f"{family} rows with G > 0.1 ({len(sub)}): Spearman with the realised Δpass@1, pooled over worlds")
        for k in COLUMNS:
            print(f"  {k:22s} {rho([value(r, k) for r in sub], y)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
