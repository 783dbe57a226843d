"""Time per training step with a <= 50%-token mask against all tokens, side by side in one process.

    python benchmarks/validity/levers/bench_step.py --config CONFIG --out FILE [--repeats 5] [--position-end E]

CONFIG is a lever-study training config (run_levers.py writes them). Each repeat samples one micro-batch
from the student (the trainer's ``make_micro_batch``), then runs the trainer's micro-batch step on it with
``all``, ``entropy_top50`` (the target's <= 50% mask), ``advantage_top20``, ``correct_only`` and ``surprising_half``
(the most surprising rollouts up to half the tokens, from the sampler's log-probs; amendment 11) in turn (the order
reversed every other repeat; the rollouts' outcomes are checked as the trainer does), each followed by
``rescale_to_kept`` and the optimizer step on a copy, timed with ``perf_counter``; then ``decoders_only``: the
decoders' forwards and the student's backward without any LM head or loss, the floor of a mask that reads the
student's logits (it must run the whole decoder). With ``--position-end E`` also ``position_half``: the window
[0, E), known before any model runs, on rollouts sampled only to E as the trainer samples them
(``LeverState.sample_to``; their sampling timed apart). Written: the median seconds of sampling and of each step,
and per mask the ratios masked / all of the step alone and of sampling + step (what a training step costs).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from opsd_diag.config import training as config  # noqa: E402
from opsd_diag.config.levers import TokenMaskSpec  # noqa: E402
from opsd_diag.engine.train_step import (CompletionHidden, micro_batch_backward, partner_hidden,  # noqa: E402
                                         rescale_to_kept)
from trainer.rollouts import make_micro_batch, step_problems  # noqa: E402
from trainer.setup import prepare  # noqa: E402

MASKS = {"all": TokenMaskSpec().settings(),
         "entropy_top50": TokenMaskSpec(kind="entropy", entropy_quantiles=[0.5, 1.0]).settings(),  # the target's
         "advantage_top20": TokenMaskSpec(kind="advantage", advantage_top=0.2).settings(),
         "correct_only": TokenMaskSpec(kind="all", rollouts="correct").settings(),  # known before the models run
         "surprising_half": TokenMaskSpec(kind="all", rollouts="surprising", rollouts_share=0.5).settings()}  # too


def fresh_copy(st):
    """(a trainable copy of the student, roles holding it, its parameters, an AdamW on them): every timed step
    starts from the same weights."""
    student = copy.deepcopy(st.roles.student).train()
    roles = copy.copy(st.roles)
    roles.student = student
    params = [p for p in student.parameters() if p.requires_grad]
    return student, roles, params, torch.optim.AdamW(params, lr=1e-5)


def step_seconds(st, mb, mask) -> tuple[float, float]:
    """(seconds of one step on ``mb`` with ``mask``, kept share), on a copy of the student."""
    student, roles, params, opt = fresh_copy(st)
    t0 = time.perf_counter()
    sums = micro_batch_backward(CompletionHidden(student), roles, mb, st.loss, pad_id=st.pad_id,
                                chunk_size=st.chunk_size, scale=1.0 / mb.n_tokens, ref=st.reference, mask=mask)
    kept = float(sums.stats["kept"]) / sums.counts["kept"]
    rescale_to_kept(params, kept)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return time.perf_counter() - t0, kept


def decoders_seconds(st, mb) -> float:
    """Seconds of the part of a step no mask that reads the student's logits can skip: the decoders' forwards
    (student with grad, partners without) and the student decoder's backward, no LM head, no loss."""
    student, roles, _, opt = fresh_copy(st)
    t0 = time.perf_counter()
    h = CompletionHidden(student)(mb.student_prompts, mb.completions, st.pad_id)  # [N, H]
    partner_hidden(roles, mb, st.loss, st.pad_id, st.reference)
    h.backward(torch.full_like(h, 1e-3))
    opt.step()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--position-end", type=int, help="also time position_half, the window [0, E) (amendment 8)")
    args = ap.parse_args(argv)
    masks = dict(MASKS)
    if args.position_end:
        masks["position_half"] = TokenMaskSpec(kind="position", positions=[0, args.position_end]).settings()
    torch.manual_seed(0)
    tc = config.load(args.config)
    st = prepare(tc, torch.device("cpu"))
    spec = tc.spec
    times = {k: [] for k in [*masks, "decoders_only"]}
    kept = {k: [] for k in masks}
    sampling, sampling_cut = [], []
    for r in range(args.repeats):
        idx = step_problems(len(st.train.problems), r, spec.per_device_train_batch_size, spec.seed)
        t0 = time.perf_counter()
        with torch.no_grad():
            mb = make_micro_batch(st.roles.student, st.tok, st.train, 0, idx, r, spec, st.stop_ids,
                                  checker=(tc.cfg.analysis.checker, tc.cfg.analysis.truncated))
        sampling.append(time.perf_counter() - t0)
        cut = None
        if args.position_end:  # the same seeds: each rollout is the whole one's first E tokens
            t0 = time.perf_counter()
            with torch.no_grad():
                cut = make_micro_batch(st.roles.student, st.tok, st.train, 0, idx, r, spec, st.stop_ids,
                                       sample_to=args.position_end)
            sampling_cut.append(time.perf_counter() - t0)
        for name in (list(masks) if r % 2 == 0 else list(masks)[::-1]):
            s, k = step_seconds(st, cut if name == "position_half" else mb, masks[name])
            times[name].append(s)
            kept[name].append(k * (cut.n_tokens / mb.n_tokens if name == "position_half" else 1.0))
        times["decoders_only"].append(decoders_seconds(st, mb))
    med = {k: statistics.median(v) for k, v in times.items()}
    samp = statistics.median(sampling)
    samp_of = {k: statistics.median(sampling_cut) if k == "position_half" else samp for k in masks}
    out = {"config": str(args.config), "repeats": args.repeats, "threads": torch.get_num_threads(),
           "sampling_s": samp, "step_s": med, "kept_share": {k: statistics.mean(v) for k, v in kept.items()},
           "ratio_step": {k: med[k] / med["all"] for k in times if k != "all"},
           "ratio_sampling_plus_step": {k: (samp_of[k] + med[k]) / (samp + med["all"]) for k in masks if k != "all"},
           "raw": {"sampling_s": sampling, "step_s": times}}
    if args.position_end:
        out.update(position_end=args.position_end, sampling_cut_s=samp_of["position_half"])
        out["raw"]["sampling_cut_s"] = sampling_cut
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "raw"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
