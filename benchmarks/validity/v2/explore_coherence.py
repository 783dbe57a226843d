"""An exploration kept as a look (committed before it ran; no product change follows from it alone): is the training
signal of a configuration shared across problems?

explore_size_drift.py found that the recommended rows that realised about nothing had hardly moved the student
(realised KL to the initial student against realised Δpass@1 of the recommended row, across the 28 never-fitted worlds:
Spearman +0.71), while nothing the diagnosis computes saw it (its lookahead KL +0.06, v2's predicted drift -0.39). An
optimiser moves the policy far over many steps only where the steps agree, and a change learnt on some problems shows on
held-out ones only where the signal is shared between problems (a rule, not a per-problem answer; the answer-only
self-teacher, G up to +0.7 and about nothing realised, is the clearest case). Neither is seen by a few steps measured on
a few prompts. The gradient of a method's own training loss on different problems is: where they point the same way,
training accumulates and transfers.

Definitions, fixed before any of it ran:
- per (teacher configuration, loss) of a world's diagnosis runs (the worlds study's diagnosis configs without ``ideal``
  and ``lookahead``, rerun; their rollouts are the study's, the seeds being the same): the student's rollouts of known
  length are split into 4 groups by problem index modulo 4; in each group at most 32 rollouts, in a seeded order
  (random.Random(derive_seed(sampling seed, 9100))); the gradient of the method's training loss
  (``engine.train_step.micro_batch_backward``, the trainer's own step, normalised by the group's tokens, no clip of
  the gradient; the sampled-token losses' advantage clip 1.0, as the committed lookahead's, run_v2.lookahead_section) with respect to every parameter of a float32 copy of the student, at the initial student;
- ``coherence``: the mean over the 6 pairs of groups of the cosine of their gradients;
- ``grad_norm``: the mean of the 4 gradients' norms; ``mean_grad_norm``: the norm of their mean;
- ``g_coh`` = G x max(coherence, 0): the part of the gap whose signal is shared.
A loss is that of the product's rows (``opsd_opd`` as ``opd``, ``opsd_jsd`` as ``jsd``).

Judged over the worlds the first look never fitted on (every world whose build is in the repository and whose rows are
committed: explore_handoff.py's 28 and ochre and umber), per world the Spearman with the realised held-out Δpass@1 of:
- ``gcoh_config``: the product's ranking (``looks.product_order``, v2_config) with g_coh as the gain;
- ``mean_rank``: the mean of each row's within-world ranks under the shipped ranking and gcoh_config;
beside the shipped ranking, G, coherence and g_coh. Across worlds, for the recommended row (explore_recommended_size's
pick): the Spearman of its coherence and g_coh with what it realised, and their AUROC for realised < +0.02.
Decision rules: an eleventh look on the ranking, judged on worlds built after its plan, is planned only if gcoh_config
or mean_rank beats the shipped ranking by at least +0.02 in the mean over the never-fitted worlds and in more of them
than it trails; a look on a size statement only if the recommended row's coherence or g_coh reaches a Spearman of at
least +0.50 with what it realised and an AUROC of at least 0.85 over the never-fitted worlds. Otherwise the columns are
reported and nothing else follows.

Reading of its output (explore_coherence.txt, 30 worlds, 1932 s of rediagnosis and gradients): no. As a configuration
order G x coherence ranks the 23 never-fitted worlds at +0.705 against the shipped ranking's +0.751 (-0.046 [-0.118,
+0.022], above in 8, below in 14); averaged with the shipped ranking +0.754 (+0.003 [-0.031, +0.039], above in 11, below
in 12). Across worlds the recommended row's coherence ranks what it realised at +0.40 with an AUROC of 0.53 for "about
nothing" (g_coh +0.24, 0.46): flint's recommended signal is among the most coherent (+0.62) and realised +0.003, umber's
+0.57 and +0.017. Neither rule fires: no look is planned on it. Whether a signal agrees across problems at the initial
student does not say whether training will move the student far or well.

    python benchmarks/validity/v2/explore_coherence.py --out DIR [--worlds a,b]    # measure (resumable per world)
    python benchmarks/validity/v2/explore_coherence.py --out DIR --keep            # rows: coherence_rows.json
    python benchmarks/validity/v2/explore_coherence.py --report > benchmarks/validity/v2/explore_coherence.txt
"""
from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity import plan as plan_mod  # noqa: E402
from benchmarks.validity import runs_io  # noqa: E402
from benchmarks.validity.v2 import explore_handoff as handoff  # noqa: E402
from benchmarks.validity.v2 import explore_lookahead_reach as reach  # noqa: E402
from benchmarks.validity.v2 import report_look2 as look2  # noqa: E402
from benchmarks.validity.v2 import report_look8 as look8  # noqa: E402
from benchmarks.validity.v2 import report_look10 as look10  # noqa: E402
from benchmarks.validity.v2 import report_v2 as v2  # noqa: E402
from benchmarks.validity.v2.explore_recommended_size import recommended_rows  # noqa: E402
from benchmarks.validity.v2.explore_size_floor import size_figures, size_lines, size_rule  # noqa: E402
from benchmarks.validity.v2.looks import explore_cli, model_file  # noqa: E402
from benchmarks.validity.v2.run_v2 import LOSS  # noqa: E402
from benchmarks.validity.worlds import run_worlds  # noqa: E402

HERE = Path(__file__).resolve().parent
KEPT = HERE / "coherence_rows.json"
GROUPS, PER_GROUP, STREAM = 4, 32, 9100
CLIP = 1.0  # the advantage clip the committed lookahead steps with (run_v2.lookahead_section)
COLUMNS = ("coherence", "g_coh")
RULES = ("accuracy_gap", "shipped", "gcoh_config", "mean_rank")


def worlds() -> list[str]:
    return [*handoff.worlds(), "ochre", "umber"]


def gradients(cfg_path: Path, run_dir: Path) -> dict[str, dict]:
    """Per teacher configuration and loss: the coherence columns of one diagnosis run."""
    import torch

    from opsd_diag.config.settings import derive_seed
    from opsd_diag.config.spec import load_config
    from opsd_diag.engine import diagnose
    from opsd_diag.engine import lookahead as la
    from opsd_diag.engine.step_sums import StepSums
    from opsd_diag.engine.train_step import CompletionHidden, MicroBatch, Roles, auto_chunk_size, micro_batch_backward
    from opsd_diag.io import store

    cfg = load_config(cfg_path)
    prep = diagnose.prepare(cfg)
    known = store.read_table(run_dir, "rollouts")
    known = known[known["length"] > 0].reset_index(drop=True)
    rng = random.Random(derive_seed(cfg.sampling.seed, STREAM))
    groups = []
    for k in range(GROUPS):
        idx = list(np.flatnonzero(known["problem_index"].to_numpy() % GROUPS == k))
        rng.shuffle(idx)
        groups.append(known.iloc[idx[:PER_GROUP]])
    trainable = copy.deepcopy(prep.student).float().train().requires_grad_(True)
    params = [p for p in trainable.parameters() if p.requires_grad]
    hidden = CompletionHidden(trainable)
    chunk = auto_chunk_size(trainable.get_output_embeddings().weight.shape[0])
    sc, pad = cfg.scoring, prep.tok.pad_token_id
    out: dict[str, dict] = {}
    for t in cfg.teachers:
        if t.name in prep.cross:
            continue
        for method in sorted(set(LOSS.values())):
            if method == "opd2" and prep.base is None:
                continue
            ref = sc.exopd_reference if method == "exopd" else None
            roles = Roles(trainable, None, "external", prep.teacher_models[t.name],
                          prep.base if (method == "opd2" or ref == "base") else None, prep.student)
            grads = []
            for g in groups:
                s_p, t_p = la._ids(g["prompt_ids.student"]), la._ids(g[f"prompt_ids.{t.name}"])
                mb = MicroBatch(0, [int(i) for i in g["problem_index"]], s_p, t_p,
                                t_p if sc.base_view == "teacher" else s_p, la._ids(g["completion_ids"]),
                                [bool(f) for f in g["finished"]])
                micro_batch_backward(hidden, roles, mb, la.loss_settings(cfg, method, CLIP), pad_id=pad,
                                     chunk_size=chunk, scale=1.0 / mb.n_tokens, ref=ref, sums=StepSums())
                grads.append(torch.cat([p.grad.detach().double().flatten() for p in params]))
                for p in params:
                    p.grad = None
            cos = [float(torch.dot(a, b) / (a.norm() * b.norm())) for a, b in combinations(grads, 2)]
            out.setdefault(t.name, {})[method] = {
                "coherence": float(np.mean(cos)), "grad_norm": float(np.mean([float(x.norm()) for x in grads])),
                "mean_grad_norm": float(torch.stack(grads).mean(0).norm()),
                "rollouts": [len(g) for g in groups]}
    return out


def measure(out: Path, names: list[str]) -> None:
    for name in names:
        world_dir = (out / name).resolve()
        done = world_dir / "coherence.json"
        if done.is_file():
            continue
        plan, t0 = reach.plan_of(name), time.time()
        runs = {}
        for run, path in run_worlds.layout_world(plan, world_dir)["diagnoses"].items():
            cfg = yaml.safe_load(Path(path).read_text())
            cfg.pop("ideal", None)
            cfg.pop("lookahead", None)
            cfg_path = world_dir / "configs" / f"coherence.{run}.yaml"
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
            d = world_dir / "diag" / run
            if not runs_io.diag_finished(d):
                subprocess.run([sys.executable, "-m", "opsd_diag.cli", "run", str(cfg_path), "--out", str(d),
                                "--quiet"], check=True)
            runs[run] = gradients(cfg_path, d)
        done.write_text(json.dumps({"world": name, "seconds": round(time.time() - t0, 1), "runs": runs}, indent=1))
        print(f"{name}: {time.time() - t0:.0f} s", flush=True)


def keep(out: Path) -> None:
    handoff.keep_runs(out, worlds(), "coherence.json", KEPT)


def with_columns(rows: list[dict], kept: dict) -> list[dict]:
    """The rows with their configuration's coherence for their loss, and g_coh."""
    plans, out = {w: reach.plan_of(w) for w in {r["world"] for r in rows}}, []
    for r in rows:
        run, inner = plan_mod.diag_source(plans[r["world"]], r["config"])
        coh = kept[r["world"]]["runs"][run].get(inner, {}).get(LOSS[r["method"]], {}).get("coherence", np.nan)
        out.append({**r, "coherence": coh, "g_coh": v2._num(r["accuracy_gap"]) * max(coh, 0.0)})
    return out


def recommended(rows: list[dict], rec: dict[str, dict], names: list[str], columns) -> dict[str, dict]:
    """Per world of ``names`` with its recommended row (explore_recommended_size's pick) among ``rows``: that row's
    realised Δpass@1 and ``columns``."""
    by_key = {(r["world"], f"{r['config']}/{r['method']}"): r for r in rows}
    return {x: {"row": rec[x]["row"], "realised": rec[x]["realised"], **{c: by_key[(x, rec[x]["row"])][c] for c in columns}}
            for x in names if x in rec and (x, rec[x]["row"]) in by_key}


def report() -> dict:
    kept, shipped = json.loads(KEPT.read_text()), model_file(16)
    rows = with_columns(look2.load_rows({"worlds": list(kept)}), kept)
    w = np.array([r["world"] for r in rows])
    ranked = look10.orders(rows, {"shipped": look8.product_gain(rows, shipped),
                                  "gcoh_config": np.array([r["g_coh"] for r in rows], dtype=float)})
    ranked["mean_rank"] = handoff.within_ranks(ranked["shipped"], w) + handoff.within_ranks(ranked["gcoh_config"], w)
    cols = {c: np.array([r[c] for r in rows], dtype=float) for c in COLUMNS}
    res = handoff.ranking_summary({**ranked, **cols}, rows, (("gcoh_config", "shipped"), ("mean_rank", "shipped")))
    rank_look = any(d["estimate"] >= 0.02 and d["above"] > d["below"] for d in res["paired"].values())
    picked = recommended(rows, recommended_rows(shipped), res["worlds"], COLUMNS)
    size = size_figures(picked, res["never_fitted"], COLUMNS)
    return {**res, "rank_look": bool(rank_look), "size": size, "size_look": size_rule(size), "recommended": picked,
            "seconds": sum(kept[x]["seconds"] for x in kept)}


def render(res: dict) -> str:
    lines = handoff.ranking_lines(res, (*RULES, *COLUMNS), 13)
    lines += size_lines(res["size"])
    lines += ["", "decision rules (docstring): a look on the ranking is " + ("planned" if res["rank_look"] else
              "not planned") + "; a look on a size statement is " + ("planned" if res["size_look"] else "not planned"),
              "", "the recommended row per world: realised, coherence, g_coh"]
    for n, r in res["recommended"].items():
        lines.append(f"  {n + (' *' if n not in res['never_fitted'] else ''):20s} {r['row']:22s} "
                     f"{r['realised']:+.3f}  {r['coherence']:+.3f}  {r['g_coh']:+.3f}")
    lines.append(f"measurement: {res['seconds']:.0f} s over {len(res['worlds'])} worlds")
    return "\n".join(lines)


def main(argv=None) -> int:
    return explore_cli(argv, __doc__, measure, keep, lambda: render(report()), worlds)


if __name__ == "__main__":
    sys.exit(main())
