"""The accuracy tables of a world's model card: greedy decoding on the held-out test split."""

from __future__ import annotations

import torch

from opsd_diag.core.stats import pass_at_k
from opsd_diag.io import templates
from opsd_diag.io.verify import is_correct
from opsd_diag.zoo import task

MAX_NEW_TOKENS = 72


@torch.no_grad()
def greedy_texts(model, tok, user_texts: list[str], batch: int = 100,
                 max_new_tokens: int = MAX_NEW_TOKENS, samples: int = 0) -> list[str]:
    """Each prompt's greedy completion (deterministic), special tokens dropped; with ``samples``,
    that many completions per prompt at temperature 1 instead (prompt by prompt, in order)."""
    tok.padding_side = "left"
    out_texts = []
    sampling = {"do_sample": True, "temperature": 1.0, "top_k": 0, "num_return_sequences": samples} if samples \
        else {"do_sample": False}
    for i in range(0, len(user_texts), batch):
        texts = [tok.apply_chat_template([{"role": "user", "content": u}], tokenize=False,
                                         add_generation_prompt=True) for u in user_texts[i:i + batch]]
        enc = tok(texts, add_special_tokens=False, padding=True, return_tensors="pt")
        out = model.generate(**enc, **sampling, max_new_tokens=max_new_tokens,
                             eos_token_id=model.config.eos_token_id, pad_token_id=tok.pad_token_id)
        out_texts += [tok.decode(ids, skip_special_tokens=True) for ids in out[:, enc["input_ids"].shape[1]:]]
    return out_texts


def sampled_pass_k(model, tok, problems: list[dict], n: int, ks: tuple[int, ...], max_new_tokens: int,
                   seed: int = 0) -> dict[str, float]:
    """pass@k (unbiased, from ``n`` samples a problem at temperature 1), averaged over problems."""
    torch.manual_seed(seed)
    texts = greedy_texts(model, tok, user_texts(problems, None), batch=25, max_new_tokens=max_new_tokens, samples=n)
    hits = [sum(is_correct(t, p["answer"], "toy") for t in texts[j * n:(j + 1) * n]) for j, p in enumerate(problems)]
    return {f"pass@{k}": sum(pass_at_k(n, c, k) for c in hits) / len(hits) for k in ks}


def greedy_correct(model, tok, problems: list[dict], user_texts: list[str], batch: int = 100,
                   max_new_tokens: int = MAX_NEW_TOKENS) -> list[bool]:
    """Per problem: answered correctly with greedy decoding (deterministic)?"""
    texts = greedy_texts(model, tok, user_texts, batch, max_new_tokens)
    return [is_correct(t, p["answer"], "toy") for p, t in zip(problems, texts)]


def eval_problems(test: list[dict], per_level: int, levels=task.LEVELS) -> list[dict]:
    """The first ``per_level`` test problems of each level, level by level."""
    return [p for level in levels for p in [q for q in test if q["meta"]["difficulty"] == level][:per_level]]


def accuracy_by_level(problems: list[dict], correct: list[bool], per_level: int | None = None,
                      levels=task.LEVELS) -> dict[str, float]:
    """Accuracy per level (over the first ``per_level`` of each level when given) and overall."""
    out = {}
    for level in levels:
        hits = [c for p, c in zip(problems, correct) if p["meta"]["difficulty"] == level][:per_level]
        out[f"level {level}"] = sum(hits) / max(1, len(hits))
    out["all"] = sum(out.values()) / len(levels)
    return out


def user_texts(problems: list[dict], context: str | None, fraction: float = 1.0, world=None) -> list[str]:
    """The student/teacher prompt text of each problem, with a context (built-in or the world's) or without."""
    if context is None:
        return [p["prompt"] for p in problems]
    template = world.template(context) if world is not None else templates.resolve(context)
    return [templates.render(template, templates.context_fields(p, fraction)) for p in problems]


def evaluate(world, models: dict, tok, test_split: list[dict], per_level: int, report, log,
             second_skill: list[dict] | None = None) -> None:
    """Fill the report's accuracy tables (the MODEL_CARD numbers), style shares and parameter counts."""
    levels, mnt = world.task.levels, world.training.max_new_tokens
    test = eval_problems(test_split, per_level, levels)
    for row, (name, ctx, frac) in world.card_rows().items():
        texts = greedy_texts(models[name], tok, user_texts(test, ctx, frac, world), max_new_tokens=mnt)
        correct = [is_correct(t, p["answer"], "toy") for p, t in zip(test, texts)]
        report.accuracy[row] = accuracy_by_level(test, correct, levels=levels)
        report.subset_accuracy[row] = accuracy_by_level(test, correct, world.training.subset_per_level, levels)
        if world.base.prefers and ctx is None:
            report.style[row] = sum(t.startswith(world.base.prefers) for t in texts) / len(texts)
        log(f"{row}: {report.accuracy[row]}")
    n = world.training.pass_k_samples
    if n:
        for name in ("teacher", "student"):
            report.pass_k[name] = sampled_pass_k(models[name], tok, test, n, (1, min(4, n)), mnt)
        log(f"sampled pass@k: {report.pass_k}")
    if second_skill:
        for name in ("teacher", "student"):
            correct = greedy_correct(models[name], tok, second_skill, user_texts(second_skill, None), max_new_tokens=mnt)
            report.second_skill[name] = sum(correct) / len(correct)
        log(f"second skill: {report.second_skill}")
    for name in ("base", "teacher", "student"):
        report.params[name] = sum(p.numel() for p in models[name].parameters())
