"""Per-problem evaluation of a policy: held-out accuracy, the forgetting check and KL to the start.

The trainer's evaluation reports pass@k averaged over problems; the study's bootstrap needs each
problem's correctness, so this module evaluates the initial student and every final checkpoint
(``checkpoints/step-N``, an HF model directory) itself, with the library's sampler
(``opsd_diag.engine.sampling.sample_hf``) and answer checker (``opsd_diag.io.verify.is_correct``):

- test:       per problem [n samples, c correct] on the held-out test split;
- regression: the same on the regression set (easier levels; the forgetting check);
- kl:         per problem [sum over sampled tokens, token count] of KL(policy || initial student),
              full vocabulary at tau = 1, on the policy's own test samples.

Every policy is sampled with the same seed and prompt order (common random numbers).

    python benchmarks/validity/evaluate.py --study DIR --jobs JOBS.json

JOBS.json: a list of {"model": PATH | "initial", "out": PATH}; finished outputs are skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from opsd_diag.core import signals  # noqa: E402
from opsd_diag.engine.sampling import sample_hf  # noqa: E402
from opsd_diag.engine.scoring import completion_hidden, lm_logits  # noqa: E402
from opsd_diag.config.spec import DataSpec  # noqa: E402
from opsd_diag.io.data import load_problems  # noqa: E402
from opsd_diag.io.models import load_model, load_tokenizer, stop_token_ids  # noqa: E402
from opsd_diag.io.verify import is_correct  # noqa: E402
from opsd_diag.config.settings import SamplingSettings  # noqa: E402


def _check(tok, problems, prompts, model, n: int, ev: dict, stop_ids, checker: str, seed: int):
    """({problem id: [n, c]}, [(problem id, prompt ids, completion ids)])."""
    s = SamplingSettings(num_samples=n, temperature=ev["temperature"], top_p=1.0,
                         max_new_tokens=ev["max_completion_length"], seed=seed, batch_size=ev["batch_size"])
    outs = sample_hf(model, tok, prompts, s, stop_ids)
    counts, samples = {}, []
    for p, prompt, per_prompt in zip(problems, prompts, outs):
        ok = [is_correct(tok.decode(o.ids, skip_special_tokens=True), p["answer"], checker) for o in per_prompt]
        counts[p["id"]] = [len(ok), int(sum(ok))]
        samples.extend((p["id"], prompt, o.ids) for o in per_prompt)
    return counts, samples


@torch.no_grad()
def kl_to_initial(model, initial, samples, pad_id: int, batch: int = 32, chunk: int = 256) -> dict:
    """{problem id: [sum of per-token KL(model || initial), tokens]} over the sampled completion tokens."""
    out: dict[str, list] = {}
    rows = [s for s in samples if s[2]]
    for lo in range(0, len(rows), batch):
        part = rows[lo:lo + batch]
        prompts, comps = [r[1] for r in part], [r[2] for r in part]
        h_cur = completion_hidden(model, prompts, comps, pad_id)  # [N, H]
        h_ini = completion_hidden(initial, prompts, comps, pad_id)  # [N, H]
        per_tok = torch.empty(h_cur.shape[0], dtype=torch.float64)
        for a in range(0, h_cur.shape[0], chunk):
            sl = slice(a, min(h_cur.shape[0], a + chunk))
            cur = signals.log_probs(lm_logits(model, h_cur[sl]), 1.0)  # [n, V]
            ini = signals.log_probs(lm_logits(initial, h_ini[sl]), 1.0)  # [n, V]
            per_tok[sl] = signals.kl(cur, ini).double()
        start = 0
        for (pid, _, comp) in part:
            acc = out.setdefault(pid, [0.0, 0])
            acc[0] += float(per_tok[start:start + len(comp)].sum())
            acc[1] += len(comp)
            start += len(comp)
    return out


def evaluate_policy(model, initial, tok, test, regression, ev: dict, checker: str, stop_ids) -> dict:
    """Per-problem test accuracy, regression accuracy and KL(model || initial) of one policy."""
    t0 = time.time()
    test_counts, samples = _check(tok, test["problems"], test["prompts"], model, ev["num_samples"], ev, stop_ids,
                                  checker, ev["seed"])
    reg_counts, _ = _check(tok, regression["problems"], regression["prompts"], model, ev["regression_samples"], ev,
                           stop_ids, checker, ev["seed"] + 1)
    if model is initial or not ev.get("kl_to_initial", True):
        kl = {pid: [0.0, 0] for pid in test_counts}
        for pid, _, comp in samples:
            kl[pid][1] += len(comp)
    else:
        kl = kl_to_initial(model, initial, samples, tok.pad_token_id, ev["batch_size"])
    return {"test": test_counts, "regression": reg_counts, "kl": kl,
            "settings": {k: ev[k] for k in ("num_samples", "regression_samples", "temperature",
                                            "max_completion_length", "seed", "pass_k")},
            "seconds": round(time.time() - t0, 2)}


def _problems(path: str, tok) -> dict:
    from opsd_diag.io.views import student_view

    problems = load_problems(DataSpec(path=path))
    return {"problems": problems, "prompts": [student_view(tok, p).ids for p in problems]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", required=True, help="study directory (plan.resolved.json, data/)")
    ap.add_argument("--jobs", required=True, help="JSON list of {model, out}")
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    study = Path(args.study)
    plan = json.loads((study / "plan.resolved.json").read_text())
    ev = plan["evaluation"]
    models = (Path(__file__).resolve().parents[2] / plan["world"]["models"]).resolve()
    tok = load_tokenizer(str(models / "student"))
    initial = load_model(str(models / "student"), dtype="float32", device="cpu")
    stop_ids = stop_token_ids(initial, tok)
    test = _problems(str(study / "data" / "test.jsonl"), tok)
    regression = _problems(str(study / "data" / "regression.jsonl"), tok)
    for job in json.loads(Path(args.jobs).read_text()):
        out = Path(job["out"])
        if out.is_file():
            continue
        if job["model"] == "initial":
            model = initial
        else:
            model = load_model(str(job["model"]), dtype="float32", device="cpu")
            if stop_token_ids(model, tok) != stop_ids:
                raise RuntimeError(f"{job['model']}: stop ids differ from the initial student's")
        res = evaluate_policy(model, initial, tok, test, regression, ev, plan["world"]["checker"], stop_ids)
        res["model"] = str(job["model"])
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(res))
        tmp.replace(out)
        print(f"evaluated {job['model']} in {res['seconds']} s -> {out}", flush=True)
        if model is not initial:
            load_model.cache_clear()  # keep memory flat over many checkpoints
    return 0


if __name__ == "__main__":
    sys.exit(main())
