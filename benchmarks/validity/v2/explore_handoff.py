"""An exploration kept as a look (committed before it ran; it chooses nothing, and no product change follows from it
alone): does the student succeed from where the teacher's own answer has got to?

G asks whether the teacher, shown its context, answers better than the student. Distillation cannot hand over the
context, only the teacher's way through the problem, and the rank errors are rows where the two part: a self-teacher
shown only the answer (G about +0.4 to +0.7, realised about 0: it writes the student's steps and then the answer it
was shown) and external teachers that write their base's preamble (quartz: G +0.78, realised -0.07 to -0.11). The
handoff gap measures the part of G the student can carry on from: the teacher writes the first half of an answer and
the student, shown only the problem, writes the rest.

Definitions, fixed before any of it ran:
- per configuration of a world's diagnosis runs (its data, prompts, views and sampling settings), 4 teacher samples
  per diagnosis prompt and 4 fresh student samples per prompt (seeds derived from the run's sampling seed on a stream
  of their own, 9000);
- handoff at a fraction f: the teacher sample's first floor(f x n) tokens (n its length, a stop id never kept; a
  teacher with another tokenizer has its prefix decoded and encoded in the student's), after which the student, on its
  own prompt, samples one continuation within what the prefix left of the run's completion budget, graded on prefix +
  continuation exactly as a diagnosis rollout is graded;
- ``handoff`` (primary, f = 0.5): the handoff's success rate minus the student's; ``handoff_25`` (secondary, f =
  0.25), and ``g4``, the 4 teacher samples' success rate minus the student's (G from twice the samples), to tell a
  gain of the handoff from one of sample size.

Judged on every world whose build is in the repository and whose rows are committed (``worlds``: the 27 of
explore_lookahead_reach.py and quartz, checked since), over the worlds the first look never fitted on, per world the Spearman with the realised held-out Δpass@1 of:
- ``handoff_config``: the product's ranking (``looks.product_order``, v2_config) with the handoff as the gain;
- ``mean_rank``: the mean of each row's within-world ranks under the shipped ranking and handoff_config;
- ``v2_handoff``: the first look's design with ``handoff`` as one more feature in both tiers, fitted
  leave-one-world-out on these worlds exactly as explore_harm_fit.py fits, beside ``v2_all`` (the same without it);
beside the shipped ranking and G. Decision rule: an eleventh look, judged on a world built after its plan, is planned on
the handoff only if handoff_config or mean_rank beats the shipped ranking, or v2_handoff beats both the shipped ranking
and v2_all, by at least +0.02 in the mean over the never-fitted worlds and in more of them than it trails. Otherwise
the handoff is reported and nothing else follows.

Reading of its output (explore_handoff.txt, 28 worlds, 700 s of measurement): the handoff sees part of what G misses
and loses what G sees. Alone, as a configuration order, it ranks the 21 never-fitted worlds at +0.705 (the column
itself +0.691), above G's +0.656 and below the shipped ranking's +0.736. It is far above G where G fails (the answer-only
self-teacher's gain vanishes: capacity's G +0.64 is a handoff of -0.04; quartz +0.27, loam +0.73, ember +0.89 against
G's +0.09, +0.20, +0.33) and far below where the teacher's advantage lies late in its answer (style +0.11 against G's
+0.58, mixed +0.49 against +0.82). Averaged with the shipped ranking it reaches +0.751, +0.015 [-0.022, +0.051] above
it (above in 13 worlds, below in 8); fitted as a feature of v2 +0.741 against v2_all's +0.746. No rule clears the +0.02
fixed above: no eleventh look is planned on it.

    python benchmarks/validity/v2/explore_handoff.py --out DIR [--worlds a,b]    # measure (resumable per world)
    python benchmarks/validity/v2/explore_handoff.py --out DIR --keep            # rows: handoff_rows.json
    python benchmarks/validity/v2/explore_handoff.py --report > benchmarks/validity/v2/explore_handoff.txt
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.v2 import explore_harm_fit as harm_fit  # noqa: E402
from benchmarks.validity.v2 import explore_lookahead_reach as reach  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.looks import explore_cli, model_file  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "handoff_rows.json"
SAMPLES = 4
STREAM = 9000
FRACTIONS = {"handoff": 0.5, "handoff_25": 0.25}
COLUMNS = ("handoff", "handoff_25", "g4")
RULES = ("accuracy_gap", "shipped", "handoff_config", "mean_rank", "v2_all", "v2_handoff")


def worlds() -> list[str]:
    return [*reach.worlds(), "quartz"]


def prefix_of(ids: list[int], stop_ids, fraction: float) -> list[int]:
    """The first floor(fraction x n) ids of a teacher sample, never its stop id."""
    body = [t for t in ids if t not in stop_ids]
    return list(body[:int(fraction * len(ids))])


def handoffs(prep, teacher_samples: dict[str, list], fraction: float, seed: int) -> dict[str, list[dict]]:
    """Per configuration, the student's continuation of each teacher sample's prefix, graded (``correct``)."""
    from opsd_diag.config.settings import derive_seed
    from opsd_diag.engine import diagnose
    from opsd_diag.engine.sampling import Completion

    cfg, budget = prep.cfg, prep.cfg.sampling.max_completion_length
    out = {}
    for n_t, (name, per_prompt) in enumerate(teacher_samples.items()):
        own = prep.cross.get(name)
        items = []  # (problem index, prefix in the student's ids)
        for i, samples in per_prompt:
            for c in samples:
                p = prefix_of(c.ids, own.stop_ids if own else prep.stop_ids, fraction)
                if own is not None:
                    p = prep.tok.encode(own.tok.decode(p, skip_special_tokens=True), add_special_tokens=False)
                items.append((i, p[:budget]))
        prompts = [prep.student_prompts[i] + p for i, p in items]
        settings = cfg.sampling.settings(derive_seed(seed, STREAM, 100 + n_t), num_samples=1)
        conts = diagnose.sample(prep, prep.student, cfg.student.model, prompts, settings, f"handoff of {name}")
        graded = []
        for (i, p), (c,) in zip(items, conts):
            room = budget - len(p)
            ids, finished = (p + c.ids, c.finished) if len(c.ids) <= room else (p + c.ids[:room], False)
            r = diagnose._checked(prep, prep.problems[i], prep.student_prompts[i], Completion(ids, finished))
            graded.append({"problem_index": i, "prefix_len": len(p), "correct": bool(r["correct"])})
        out[name] = graded
    return out


def measure_run(cfg_path: Path) -> dict[str, dict]:
    """Per configuration of one diagnosis run: the handoff columns and the rates they come from."""
    from opsd_diag.config.settings import derive_seed
    from opsd_diag.config.spec import load_config
    from opsd_diag.engine import diagnose

    cfg = load_config(cfg_path)
    prep = diagnose.prepare(cfg)
    seed, idx = cfg.sampling.seed, list(range(len(prep.problems)))
    own = diagnose.sample(prep, prep.student, cfg.student.model, [prep.student_prompts[i] for i in idx],
                          cfg.sampling.settings(derive_seed(seed, STREAM, 0), num_samples=SAMPLES), "the student")
    student = np.mean([diagnose._checked(prep, prep.problems[i], prep.student_prompts[i], c)["correct"]
                       for i, per in zip(idx, own) for c in per])
    teacher_samples, teacher_rate = {}, {}
    for n_t, t in enumerate(cfg.teachers):
        model_name = cfg.student.model if t.is_self else t.model
        cross = prep.cross.get(t.name)
        outs = diagnose.sample(prep, prep.teacher_models[t.name], model_name,
                               [prep.teacher_prompts[t.name][i] for i in idx],
                               cfg.sampling.settings(derive_seed(seed, STREAM, 1 + n_t), num_samples=SAMPLES),
                               f"teacher config {t.name}", cross)
        teacher_samples[t.name] = list(zip(idx, outs))
        teacher_rate[t.name] = float(np.mean([
            diagnose._checked(prep, prep.problems[i], prep.teacher_prompts[t.name][i], c, cross and cross.tok)
            ["correct"] for i, per in zip(idx, outs) for c in per]))
    rates = {col: handoffs(prep, teacher_samples, f, seed + k) for k, (col, f) in enumerate(FRACTIONS.items())}
    out = {}
    for t in cfg.teachers:
        row = {"student": float(student), "teacher": teacher_rate[t.name], "g4": teacher_rate[t.name] - student,
               "n_prompts": len(idx)}
        for col in FRACTIONS:
            g = rates[col][t.name]
            row[f"{col}_rate"] = float(np.mean([x["correct"] for x in g]))
            row[col] = row[f"{col}_rate"] - float(student)
            row[f"{col}_mean_prefix"] = float(np.mean([x["prefix_len"] for x in g]))
        out[t.name] = row
    return out


def measure(out: Path, names: list[str]) -> None:
    for name in names:
        world_dir = (out / name).resolve()
        done = world_dir / "handoff.json"
        if done.is_file():
            continue
        plan, t0 = reach.plan_of(name), time.time()
        runs = {run: measure_run(Path(p)) for run, p in run_worlds.layout_world(plan, world_dir)["diagnoses"].items()}
        done.write_text(json.dumps({"world": name, "seconds": round(time.time() - t0, 1), "runs": runs}, indent=1))
        print(f"{name}: {sum(len(r) for r in runs.values())} configurations in {time.time() - t0:.0f} s", flush=True)


def keep_runs(out: Path, names: list[str], filename: str, kept_path: Path) -> None:
    """Each measured world's ``out/<world>/<filename>`` (its seconds and runs), kept in ``kept_path``, one row a line."""
    kept = {}
    for w in names:
        f = out / w / filename
        if f.is_file():
            d = json.loads(f.read_text())
            kept[w] = {"seconds": d["seconds"], "runs": d["runs"]}
    kept_path.write_text(look2.records_json(kept) + "\n")


def keep(out: Path) -> None:
    keep_runs(out, worlds(), "handoff.json", KEPT)


def config_row(kept: dict, world: str, row: dict) -> dict:
    """The kept handoff columns of a product row's configuration ({} where its world was not measured)."""
    return kept.get(world, {}).get("runs", {}).get(row["diagnosis_run"], {}).get(row["diagnosis_config"], {})


def rows_with_handoff(kept: dict) -> list[dict]:
    rows = look2.load_rows({"worlds": list(kept)})
    return [{**r, **{c: kept[r["world"]]["runs"][r["diagnosis_run"]][r["diagnosis_config"]][c] for c in COLUMNS}}
            for r in rows]


def within_ranks(score: np.ndarray, worlds: np.ndarray) -> np.ndarray:
    """Each row's average rank of ``score`` among its world's rows (1: lowest)."""
    from scipy.stats import rankdata
    out = np.full(len(score), np.nan)
    for w in set(worlds):
        k = np.flatnonzero(worlds == w)
        out[k] = rankdata(score[k])
    return out


def ranking_summary(scores: dict[str, np.ndarray], rows: list[dict], pairs) -> dict:
    """Per world the Spearman of each score with the realised Δpass@1, their means over the never-fitted worlds and
    over all, and each pair (a, b) of ``pairs`` as a paired mean difference over the never-fitted worlds."""
    per = {k: v2.per_world(x, rows, "d_pass1")["worlds"] for k, x in scores.items()}
    worlds = list(per["shipped"])
    never = [x for x in worlds if x not in look8.FITTED]
    return {"worlds": worlds, "never_fitted": never, "per_world": per,
            "mean_never_fitted": {k: float(np.mean([per[k][x] for x in never])) for k in per},
            "mean_all": {k: float(np.mean([per[k][x] for x in worlds])) for k in per},
            "paired": {f"{a} minus {b}": look10.paired_mean(per[a], per[b], never) for a, b in pairs}}


def ranking_lines(res: dict, cols, width: int) -> list[str]:
    """``ranking_summary`` as a table, one world a line, then its paired differences."""
    lines = ["Spearman with the realised held-out Δpass@1 within each world (* the shipped models were fitted on it)",
             "", f"{'world':20s} " + " ".join(f"{c:>{width}s}" for c in cols)]
    for n in res["worlds"]:
        tag = " *" if n not in res["never_fitted"] else ""
        lines.append(f"{n + tag:20s} " + " ".join(f"{res['per_world'][c][n]:+{width}.2f}" for c in cols))
    for label, m in ((f"mean, {len(res['never_fitted'])} never fitted", res["mean_never_fitted"]),
                     (f"mean, all {len(res['worlds'])}", res["mean_all"])):
        lines.append(f"{label:20s} " + " ".join(f"{m[c]:+{width}.3f}" for c in cols))
    lines.append("")
    for k, d in res["paired"].items():
        lines.append(f"{k} over the never fitted: {d['estimate']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] (bootstrap "
                     f"over worlds), above in {d['above']}, below in {d['below']}")
    return lines


def report() -> dict:
    kept, shipped = json.loads(KEPT.read_text()), model_file(16)
    rows = rows_with_handoff(kept)
    w = np.array([r["world"] for r in rows])
    ranked = look10.orders(rows, {"shipped": look8.product_gain(rows, shipped), "v2_all": harm_fit.gains(rows, []),
                                  "v2_handoff": harm_fit.gains(rows, ["handoff"]),
                                  "handoff_config": np.array([r["handoff"] for r in rows], dtype=float)})
    ranked["mean_rank"] = within_ranks(ranked["shipped"], w) + within_ranks(ranked["handoff_config"], w)
    cols = {c: np.array([r[c] for r in rows], dtype=float) for c in COLUMNS}
    res = ranking_summary({**ranked, **cols}, rows, (("handoff_config", "shipped"), ("mean_rank", "shipped"),
                                                     ("v2_handoff", "shipped"), ("v2_handoff", "v2_all")))
    ok = {k: d["estimate"] >= 0.02 and d["above"] > d["below"] for k, d in res["paired"].items()}
    look = ok["handoff_config minus shipped"] or ok["mean_rank minus shipped"] or (
        ok["v2_handoff minus shipped"] and ok["v2_handoff minus v2_all"])
    return {**res, "look": bool(look), "seconds": sum(kept[x]["seconds"] for x in kept),
            "configs": {x: {f"{run}/{c}": {k: kept[x]["runs"][run][c][k] for k in ("student", "teacher", *COLUMNS)}
                            for run in kept[x]["runs"] for c in kept[x]["runs"][run]} for x in res["worlds"]}}


def render(res: dict) -> str:
    lines = ranking_lines(res, (*RULES, *COLUMNS), 14)
    lines += ["", "decision rule (docstring): an eleventh look on the handoff is " +
              ("planned" if res["look"] else "not planned"), "",
              "per configuration: student and teacher success rates (4 samples a prompt), handoff (f 0.5), "
              "handoff_25, g4"]
    for n in res["worlds"]:
        lines.append(f"  {n}: " + "; ".join(f"{c} {v['student']:.2f}/{v['teacher']:.2f} {v['handoff']:+.2f} "
                                             f"{v['handoff_25']:+.2f} {v['g4']:+.2f}"
                                             for c, v in res["configs"][n].items()))
    lines.append(f"measurement: {res['seconds']:.0f} s over {len(res['worlds'])} worlds")
    return "\n".join(lines)


def main(argv=None) -> int:
    return explore_cli(argv, __doc__, measure, keep, lambda: render(report()), worlds)


if __name__ == "__main__":
    sys.exit(main())
