"""An exploration kept as a look (committed before it ran; it chooses nothing, and no product change follows from it
alone): does the diagnosis see where training does its damage?

Issue 32's reading of the outcome worlds: training moves the policy at every token and does its damage where the
student is confident and the teacher is wrong. The shipped ranking misses most where a teacher that looks better (G
well above 0) realises a loss, e.g. a teacher writing its base's preamble (ember, quartz). One column, fixed before
this ran, from the diagnosis' own token table (no new model run): per configuration,

    harm = mean over the tokens of the student's correct rollouts where the student is confident (its probability of
           its own token >= 0.5) of max(0, -r_opd), r_opd = log p_teacher - log p_student of the sampled token,

how hard the teacher pushes the student off the tokens of answers it already gets right. Per world, the Spearman with
the realised held-out Δpass@1 of -harm (configuration-level, methods tied), of ``harm_config`` (``looks.product_order``
with -harm as the gain: configurations by it, the fifth look's method order within one), of the shipped ranking and
G, and of ``mean_rank``: the mean of a row's within-world ranks under the shipped ranking and harm_config (no weight
fitted). Means over the worlds; how often mean_rank is above and below the shipped ranking.

The token tables are those of the diagnosis runs of explore_lookahead_reach.py's rediagnosis (the lookahead's
learning rate changes no token column) and of the checks' studies; the per-configuration values are kept in
harm_rows.json so the report reruns without them.

Reading of its output (explore_harm.txt, 28 worlds): the column sees something. Alone it ranks a world's rows at
+0.630 on average, near G's +0.654, from the token table alone and with no accuracy measured, and it is best where G
is worst (quartz +0.51 against G's +0.09, loam +0.68 against +0.20). Averaged with the shipped ranking it gives +0.728
against +0.732, above in 15 of 28 worlds and below in 13: no gain, and no look was built here. Its use, if any, is as a
feature of a model fitted leave-one-world-out and judged on a world built after that plan.

    python benchmarks/validity/v2/explore_harm.py --runs DIR [DIR ...] --keep    # DIR/<world>/diag/<run>/tokens.parquet
    python benchmarks/validity/v2/explore_harm.py --report > benchmarks/validity/v2/explore_harm.txt
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import model_file, product_order  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "harm_rows.json"
CONFIDENT = math.log(0.5)
RULES = ("accuracy_gap", "shipped", "harm", "harm_config", "mean_rank")


def harm(run: Path) -> dict[str, float]:
    """Per configuration of one diagnosis run: the column above."""
    tokens = pd.read_parquet(run / "tokens.parquet", columns=["rollout_id", "config", "lp_s", "r_opd"])
    correct = pd.read_parquet(run / "rollouts.parquet", columns=["rollout_id", "correct"])
    t = tokens.merge(correct, on="rollout_id")
    t = t[t["correct"].astype(bool) & (t["lp_s"] >= CONFIDENT)]
    return {c: float(np.clip(-g["r_opd"].to_numpy(np.float64), 0, None).mean()) for c, g in t.groupby("config")}


def keep(dirs: list[Path]) -> None:
    kept = {}
    for w in [*look10.seen(), look10.plan()["added_world"]["name"], "quartz"]:
        found = [d / w / "diag" for d in dirs if (d / w / "diag").is_dir()]
        if found:
            kept[w] = {run.name: harm(run) for run in sorted(found[0].iterdir()) if (run / "tokens.parquet").is_file()}
    KEPT.write_text(look2.records_json(kept) + "\n")


def ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x)).astype(float)


def report() -> dict:
    kept = json.loads(KEPT.read_text())
    shipped = model_file(16)
    done = list(kept)
    rows = look2.load_rows({"worlds": done})
    h = np.array([kept[r["world"]][r["diagnosis_run"]].get(r["diagnosis_config"], np.nan) for r in rows])
    w = np.array([r["world"] for r in rows])
    gain = look8.product_gain(rows, shipped)
    score = {k: np.full(len(rows), np.nan) for k in RULES}
    score["accuracy_gap"] = np.array([v2._num(r["accuracy_gap"]) for r in rows])
    score["harm"] = -h
    for name in done:
        k = np.flatnonzero(w == name)
        sub = [rows[i] for i in k]
        score["shipped"][k] = product_order(sub, gain[k], "v2_config")
        score["harm_config"][k] = product_order(sub, -h[k], "v2_config")
        score["mean_rank"][k] = ranks(score["shipped"][k]) + ranks(score["harm_config"][k])
    per = {k: v2.per_world(x, rows, "d_pass1")["worlds"] for k, x in score.items()}
    return {"worlds": done, "per_world": per, "mean": {k: float(np.nanmean([per[k][n] for n in done])) for k in per},
            "above": int(sum(per["mean_rank"][n] > per["shipped"][n] for n in done)),
            "below": int(sum(per["mean_rank"][n] < per["shipped"][n] for n in done))}


def render(res: dict) -> str:
    lines = ["Spearman with the realised held-out Δpass@1 within each world: G, the shipped ranking, -harm (the teacher's "
             "push off the confident tokens of correct rollouts), harm as a configuration order, and the mean of the "
             "shipped and harm_config ranks", "", f"{'world':18s} " + " ".join(f"{c:>13s}" for c in RULES)]
    for n in res["worlds"]:
        lines.append(f"{n:18s} " + " ".join(f"{res['per_world'][c][n]:+13.2f}" for c in RULES))
    lines.append(f"{'mean of worlds':18s} " + " ".join(f"{res['mean'][c]:+13.3f}" for c in RULES))
    lines += ["", f"mean_rank against the shipped ranking: above in {res['above']}, below in {res['below']} of "
              f"{len(res['worlds'])} worlds"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, nargs="*", default=[])
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args(argv)
    if args.keep:
        keep(args.runs)
    if args.report:
        print(render(report()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
