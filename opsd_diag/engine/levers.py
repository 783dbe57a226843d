"""The diagnosis' levers (``lookahead.levers``): per token mask, the share of the tokens and of the signal it keeps,
its lookahead, and a lever recommendation; stored in ``summary.json`` under ``levers``.

For one (teacher config, loss method): the training section's (its teacher, its per-token loss) when it has
one the lookahead can step, else the lookahead's with the largest log-likelihood-gap change. Each candidate
mask (``CANDIDATES``, the lever study's) is applied to the step half of the diagnosis rollouts with the
initial student and the teacher (``core.token_mask``: the kept share of tokens and of the summed |signal|),
then looked ahead on (``engine.lookahead.take_steps`` with the mask: the trainer's step, normalised by the kept
tokens) and measured on the other half like the lookahead. The recommendation is the candidate with the largest
lookahead Δll (the correct-minus-incorrect log-likelihood gap change, the lookahead's lower-variance proxy of
the success change), with its interval.
"""

from __future__ import annotations

from pathlib import Path

import torch

from opsd_diag.config.levers import CANDIDATES, TokenMaskSpec
from opsd_diag.config.training_fit import training_teacher
from opsd_diag.core import token_mask
from opsd_diag.core.stats import jsonable
from opsd_diag.engine.scoring import completion_hidden
from opsd_diag.engine.train_step import MicroBatch, Roles, auto_chunk_size, partner_hidden, token_scores
from opsd_diag.io import store


def target(cfg, summary: dict, methods: tuple[str, ...]) -> tuple[str, str]:
    """(config, loss method) the levers are diagnosed for; ``methods``: the losses a lookahead can step."""
    tr = cfg.training
    if tr is not None and tr.loss_method in methods:
        teacher = training_teacher(cfg)
        if teacher is not None:
            return teacher.name, tr.loss_method
    la = (summary.get("lookahead") or {}).get("configs") or {}
    rows = [(r["dll"]["estimate"], c, m) for c, ms in la.items() for m, r in ms.items()
            if isinstance(r, dict) and "dll" in r and r["dll"].get("estimate") is not None]
    if rows:
        _, c, m = max(rows)
        return c, m
    return cfg.teachers[0].name, list(cfg.lookahead.methods)[0]


def _ids(column) -> list[list[int]]:
    return [[int(t) for t in x] for x in column]


def micro_batches(rows, config: str, base_view: str, size: int) -> list[MicroBatch]:
    ids = _ids
    out = []
    for lo in range(0, len(rows), size):
        b = rows.iloc[lo:lo + size]
        s, t = ids(b["prompt_ids.student"]), ids(b[f"prompt_ids.{config}"])
        out.append(MicroBatch(lo, [int(i) for i in b["problem_index"]], s, t, t if base_view == "teacher" else s,
                              ids(b["completion_ids"]), [bool(f) for f in b["finished"]],
                              [None if c != c else bool(c) for c in b["correct"]]))
    return out


@torch.no_grad()
def mask_shares(roles: Roles, mbs: list[MicroBatch], loss, ref, pad_id: int, masks: dict) -> dict[str, tuple]:
    """Per candidate: (kept share of tokens, kept share of the summed |signal|) over ``mbs``."""
    chunk = auto_chunk_size(roles.student.get_output_embeddings().weight.shape[0])
    kept = {k: [] for k in masks}
    signal = []
    for mb in mbs:
        h_s = completion_hidden(roles.student, mb.student_prompts, mb.completions, pad_id)  # [N, H]
        partners = partner_hidden(roles, mb, loss, pad_id, ref, base=roles.base is not None)
        scores = token_scores(roles, mb, h_s, loss, partners, ref, chunk)
        signal.append(scores["signal"])
        for k, m in masks.items():
            kept[k].append(token_mask.keep(m, scores, [len(c) for c in mb.completions], mb.correct))
    sig = torch.cat(signal)
    return {k: token_mask.shares(torch.cat(v), sig) for k, v in kept.items()}


def for_diagnosis(run_dir, cfg, student, teacher_models: dict, base, tok, cross: list[str], la) -> dict:
    """The levers of a finished diagnosis in ``run_dir`` (after its lookahead), into ``summary.json``. ``la``:
    the lookahead's module (``engine.lookahead``), passed in by the diagnosis (which imports both), so this
    module's imports stay within the depth limit."""
    path = Path(run_dir) / "summary.json"
    summary = store.read_json(path)
    config, method = target(cfg, summary, la.LOSS_METHODS)
    if config in cross:
        result = {"status": "skipped", "reason": "a teacher with another tokenizer: no lever lookahead yet"}
    else:
        result = run(cfg, student, teacher_models[config], base, store.read_table(run_dir, "rollouts"), config, method,
                     tok.pad_token_id, la)
    store.atomic_write_json(path, {**store.read_json(path), "levers": jsonable(result)})
    return result


def run(cfg, student, teacher, base, rollouts, config: str, method: str, pad_id: int, lookahead) -> dict:
    s, clip = lookahead.settings(cfg)
    loss = lookahead.loss_settings(cfg, method, clip)
    ref = cfg.scoring.exopd_reference if method == "exopd" else None
    step_rows, measure_rows = lookahead.split(rollouts)
    if step_rows.empty or measure_rows.empty:
        return {"status": "skipped", "reason": "the lever lookahead needs scored rollouts with known outcomes on "
                                               "at least two problems"}
    masks = {k: TokenMaskSpec(**v).settings() for k, v in CANDIDATES.items()}
    with_base = base if (method == "opd2" or ref == "base") else None
    roles = Roles(student, None, "external", teacher, base, student)
    shares = mask_shares(roles, micro_batches(step_rows, config, cfg.scoring.base_view, s.rollouts_per_step), loss,
                         ref, pad_id, masks)
    initial = lookahead.measure_initial(student, measure_rows, pad_id, s.sampling_temperature)
    out = {}
    for name, m in masks.items():
        stepped, cost = lookahead.take_steps(
            student, lambda trainable: Roles(trainable, None, "external", teacher, with_base, student), step_rows,
            config, loss, ref, s, pad_id, cfg.scoring.base_view, mask=m)
        measured = lookahead.measure(stepped, initial, pad_id, s.sampling_temperature, cfg.analysis.bootstrap,
                                     cfg.sampling.seed)
        out[name] = {"token_mask": CANDIDATES[name], "kept_share": shares[name][0], "signal_share": shares[name][1],
                     **{k: measured[k] for k in ("dv", "dll", "kl")}, **cost}
        del stepped
    return {"status": "ok", "config": config, "method": method, "settings": out, "recommendation": recommend(out)}


def recommend(settings: dict) -> dict | None:
    """The candidate with the largest lookahead Δll estimate, with its interval and all-token training's."""
    ok = {k: v for k, v in settings.items() if v["dll"].get("estimate") is not None
          and v["dll"]["estimate"] == v["dll"]["estimate"]}
    if not ok:
        return None
    best = max(ok, key=lambda k: ok[k]["dll"]["estimate"])
    return {"setting": best, "token_mask": settings[best]["token_mask"], "dll": settings[best]["dll"],
            "dll_all": settings.get("all", {}).get("dll"),
            "basis": "largest lookahead Δll (change of the correct-minus-incorrect log-likelihood gap)"}
