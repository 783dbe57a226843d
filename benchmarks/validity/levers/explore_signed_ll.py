"""An exploration kept as a look (not pre-registered; nothing in the product follows from it alone): can the lever
lookahead compare masks where its Δll is blind? Δll needs a measurement prompt with both a correct and an incorrect
rollout; in rule_vs_instance2, forgetting and crossed no prompt has both, and rule 2 keeps all tokens there by default.
A measure defined on every prompt: the signed log-likelihood change, per prompt the mean over its rollouts of
(+1 correct, -1 incorrect) x the rollout's mean per-token log-probability change. Per world of the lever study (every
world is seen: the masks' realised Δpass@1 are committed in levers_analysis.json), each candidate mask is stepped as
the lever lookahead steps it (the world's diagnosis from `run_v2.py --look 1`), and reported: Spearman of Δsll and of
Δll with the realised Δpass@1 over the masks run, and which mask a paired Δsll rule (the largest difference from all
tokens whose interval lies above 0) would pick, with its regret against the best realised mask.

    python benchmarks/validity/levers/explore_signed_ll.py [--diag-root /work/runs/v2]

Reading of its output (explore_signed_ll.txt): Δsll does not see what the masks do. In crossed, where Δll is blind,
it ranks incorrect_only (the best realised mask) below all tokens; its Spearman with the realised Δpass@1 changes sign
between worlds; and a paired rule on it moves off all tokens on differences of order 1e-5 in log-probability, which
are beyond the bootstrap noise but have no practical size. No plan follows from it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.validity.levers.recommend_levers import LOSS  # noqa: E402
from benchmarks.validity.levers.rows import spearman  # noqa: E402
from benchmarks.validity.levers.run_levers import best_of  # noqa: E402
from benchmarks.validity.levers.run_levers import load_plan  # noqa: E402
from opsd_diag.config.levers import CANDIDATES, TokenMaskSpec  # noqa: E402
from opsd_diag.config.spec import load_config  # noqa: E402
from opsd_diag.core import signals  # noqa: E402
from opsd_diag.core.stats import beyond_noise, paired_difference  # noqa: E402
from opsd_diag.engine import lookahead  # noqa: E402
from opsd_diag.engine.train_step import Roles  # noqa: E402
from opsd_diag.io import store  # noqa: E402
from opsd_diag.io.models import load_spec  # noqa: E402

HERE = Path(__file__).resolve().parent


def row_changes(stepped, initial: torch.Tensor, rows, pad_id: int, temperature: float) -> np.ndarray:
    """Each measurement rollout's mean per-token log-probability change of its own tokens."""
    ids = torch.tensor([t for c in rows["completion_ids"] for t in c], dtype=torch.long)
    new = signals.token_logprob(lookahead.policy_logp(stepped, rows, pad_id, temperature), ids).double()
    lengths = [len(c) for c in rows["completion_ids"]]
    return np.array([float(x.mean()) for x in torch.split(new - initial, lengths)])


def world(plan: dict, name: str, diag: Path) -> dict:
    best = best_of(plan, name)
    cfg = load_config(diag / "config.yaml")
    tok, student = load_spec(cfg.student, "cpu")
    t = next(x for x in cfg.teachers if x.name == best["config"])
    teacher = student if t.is_self else load_spec(cfg.student.model_copy(update={"model": t.model}), "cpu")[1]
    s, clip = lookahead.settings(cfg)
    loss = lookahead.loss_settings(cfg, LOSS[best["method"]], clip)
    step_rows, measure_rows = lookahead.split(store.read_table(diag, "rollouts"))
    m = lookahead.measure_initial(student, measure_rows, tok.pad_token_id, s.sampling_temperature)
    ids = torch.tensor([t for c in measure_rows["completion_ids"] for t in c], dtype=torch.long)
    initial = signals.token_logprob(m.old_full, ids).double()
    sign = np.where(measure_rows["correct"].astype(bool).to_numpy(), 1.0, -1.0)
    prompts = measure_rows["problem_id"].to_numpy()
    out = {}
    for mask, kw in CANDIDATES.items():
        stepped, _ = lookahead.take_steps(student, lambda tr: Roles(tr, None, "external", teacher, None, student),
                                          step_rows, best["config"], loss, None, s, tok.pad_token_id,
                                          cfg.scoring.base_view, mask=TokenMaskSpec(**kw).settings())
        change = sign * row_changes(stepped, initial, measure_rows, tok.pad_token_id, s.sampling_temperature)
        sll = {p: float(change[prompts == p].mean()) for p in sorted(set(prompts))}
        dll = lookahead.measure(stepped, m, tok.pad_token_id, s.sampling_temperature, 200, 0, per_prompt=True)
        out[mask] = {"sll": sll, "dll": dll["dll"]["estimate"]}
    n_boot, seed = cfg.analysis.bootstrap, cfg.sampling.seed
    return {k: {"sll": float(np.mean(list(v["sll"].values()))), "dll": v["dll"],
                "sll_vs_all": paired_difference(v["sll"], out["all"]["sll"], n_boot, seed)} for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--diag-root", type=Path, default=Path("/work/runs/v2"))
    args = ap.parse_args(argv)
    plan = load_plan()
    realised = json.loads((HERE / "levers_analysis.json").read_text())["worlds"]
    lines = []
    for name in ["diversity", "rule_vs_instance2", "forgetting", "chains", "crossed", "mixed", "relay"]:
        masks = world(plan, name, args.diag_root / name / "diag" / "main")
        done = {k: v["d_pass1"]["estimate"] for k, v in realised[name]["settings"].items()
                if v.get("status") == "ok" and k in masks}
        best = max(done, key=done.get)
        pick = beyond_noise({k: v["sll_vs_all"] for k, v in masks.items() if k != "all"}) or "all"
        run = [k for k in masks if k in done]
        fin = [k for k in run if masks[k]["dll"] is not None and np.isfinite(masks[k]["dll"])]
        row = {"masks": masks, "realised": done, "best": best, "pick": pick,
               "pick_d_pass1": done.get(pick), "regret": None if pick not in done else done[best] - done[pick],
               "spearman_sll": spearman([masks[k]["sll"] for k in run], [done[k] for k in run]),
               "spearman_dll": spearman([masks[k]["dll"] for k in fin], [done[k] for k in fin]) if len(fin) > 2
               else float("nan")}
        regret = "not run" if row["regret"] is None else f"{row['regret']:+.3f}"
        lines.append(f"{name:18s} paired-Δsll pick {pick:22s} regret {regret}  best {best} {done[best]:+.3f}  "
                     f"Spearman(Δsll, Δpass@1) {row['spearman_sll']:+.2f} over {len(run)}  "
                     f"Spearman(Δll, Δpass@1) {row['spearman_dll']:+.2f} over {len(fin)}")
        for k, v in masks.items():
            d = v["sll_vs_all"]
            lines.append(f"    {k:22s} Δsll {v['sll']:+.5f}  vs all {d['estimate']:+.5f} [{d['lo']:+.5f}, "
                         f"{d['hi']:+.5f}]  realised {done.get(k, float('nan')):+.3f}")
        print(lines[-len(masks) - 1], flush=True)
    (HERE / "explore_signed_ll.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
