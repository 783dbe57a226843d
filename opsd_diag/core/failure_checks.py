"""Failure checks: the mistakes distillation users report, each one line with the numbers behind it. Pure.

Each function takes plain arrays and returns a ``Check`` (fired or not, its line, its numbers). The thresholds
are the constants below; docs/design.md#failure-checks states them and why. ``opsd_diag.checks`` gathers the
inputs from a run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

NEAR_ZERO = 1e-3         # nats: a per-token value below this moves nothing
DEAD_SHARE = 0.95        # a signal near zero on more than this share of tokens: the loss does (almost) nothing
TEMPERATURE_TOL = 1e-6
TRUNCATED_MAX = 0.2      # share of rollouts cut at max length (or of prompts whose context was shortened)
HEADROOM_MIN = 0.02      # pass@k − pass@1 below this while pass@1 lies in (PASS_LO, PASS_HI): samples agree
PASS_LO, PASS_HI = 0.05, 0.95
DISTINCT_N = 4           # n of the distinct-n detector
DISTINCT_MIN = 0.3       # mean within-prompt distinct-n below this: the samples of a prompt repeat each other
ENTROPY_MIN = 0.1        # nats: a rollout whose student entropies sum to less hardly leaves the greedy path
COLLAPSED_SHARE = 0.5    # ... and more than this share of such rollouts is a collapsed policy
LOSS_SIGNALS = ("r_opd", "a_opd", "a_d2", "a_ex", "jsd", "kl_rev")  # what the methods train on
ANSWER_SIGNAL_MAX = 0.5  # share of a config's JSD on the final answer's tokens above which it teaches the answer
ANSWER_TOKENS_MAX = 0.2  # ... while those tokens are at most this share of the tokens (an answer after steps)
ANSWER_CHECK = "answer-only signal"  # its name: the decision's caution and the studies look it up


@dataclass(frozen=True)
class Check:
    name: str
    fired: bool
    line: str
    numbers: dict = field(default_factory=dict)

    def text(self) -> str:
        return f"{'FIRES' if self.fired else 'ok   '}  {self.name}: {self.line}"


def near_zero_share(values: np.ndarray) -> float:
    """Share of finite values with |v| < NEAR_ZERO."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    return float((np.abs(v) < NEAR_ZERO).mean()) if v.size else float("nan")


def dead_signal(values: dict[tuple[str, str], np.ndarray]) -> Check:
    """``values``: (config, signal) -> its per-token values. Fires for every pair near zero on > DEAD_SHARE."""
    shares = {f"{c}/{s}": near_zero_share(v) for (c, s), v in values.items()}
    shares = {k: x for k, x in shares.items() if np.isfinite(x)}
    dead = {k: x for k, x in shares.items() if x > DEAD_SHARE}
    if dead:
        line = "; ".join(f"{k} is |v| < {NEAR_ZERO:g} on {x:.1%} of tokens" for k, x in dead.items())
        line += ": a loss on it will do almost nothing"
    else:
        worst = max(shares.items(), key=lambda kv: kv[1], default=("n/a", float("nan")))
        line = (f"no signal is near zero (|v| < {NEAR_ZERO:g}) on more than {DEAD_SHARE:.0%} of tokens "
                f"(highest: {worst[0]} {worst[1]:.1%})")
    return Check("near-zero signal", bool(dead), line, {"near_zero_share": shares, "dead": sorted(dead)})


def temperature(sampling: float, scoring: float) -> Check:
    """Fires when the teachers and the student are scored at another temperature than the student sampled at."""
    fired = abs(sampling - scoring) > TEMPERATURE_TOL
    line = (f"scored at T={scoring:g} but the student sampled at T={sampling:g}: the signals describe another "
            "distribution than the rollouts'; score at the sampling temperature" if fired
            else f"scored at the sampling temperature T={sampling:g}")
    return Check("temperature", fired, line, {"sampling_temperature": sampling, "scoring_temperature": scoring})


def truncation(truncated: np.ndarray, context_truncated: dict[str, int], n_problems: int) -> Check:
    """Share of rollouts cut at max length, and per config the share of prompts whose context was shortened."""
    t = np.asarray(truncated, bool)
    share = float(t.mean()) if t.size else 0.0
    ctx = {c: n / n_problems for c, n in context_truncated.items() if n_problems}
    over = {c: x for c, x in ctx.items() if x > TRUNCATED_MAX}
    fired = share > TRUNCATED_MAX or bool(over)
    line = f"{share:.1%} of rollouts ({int(t.sum())} of {t.size}) cut at max_completion_length"
    if ctx:
        line += "; context shortened on " + ", ".join(f"{c} {x:.0%}" for c, x in ctx.items())
    if fired:
        line += f" (above {TRUNCATED_MAX:.0%}: raise sampling.max_completion_length or scoring.max_prompt_length)"
    return Check("truncation", fired, line, {"truncated_share": share, "n_rollouts": int(t.size),
                                             "context_truncated_share": ctx})


def _tail(ids: list[int], special: set[int]) -> tuple[int, ...]:
    """The ids from the last special token on (the generation header of a chat template), or () without one."""
    last = max((i for i, t in enumerate(ids) if t in special), default=None)
    return () if last is None else tuple(ids[last:])


def template(student: list[list[int]], teachers: dict[str, list[list[int]]], special: set[int],
             sampler_differs: int = 0, n_sampler: int = 0) -> Check:
    """Per teacher config, the prompts whose special tokens (as a multiset) or generation header (the ids from the
    last special token on) differ from the student's view of the same problem; ``sampler_differs`` of
    ``n_sampler``: rollouts of a file whose sampler prompt ids are not the student's view."""
    bad = {}
    for config, prompts in teachers.items():
        n = sum(Counter(t for t in s if t in special) != Counter(t for t in q if t in special)
                or _tail(s, special) != _tail(q, special) for s, q in zip(student, prompts))
        bad[config] = n
    fired = any(bad.values()) or sampler_differs > 0
    parts = [f"{c}: {n} of {len(student)} prompts" for c, n in bad.items() if n]
    line = ("special tokens or generation header differ from the student's view: " + ", ".join(parts)
            if parts else "every teacher view has the student's special tokens and generation header")
    if n_sampler:
        line += (f"; the sampler's prompt ids differ from the student's view on {sampler_differs} of {n_sampler} "
                 "rollouts")
    return Check("chat template", fired, line, {"mismatched_prompts": bad, "n_prompts": len(student),
                                                "sampler_differs": sampler_differs, "n_sampler": n_sampler})


def distinct_n(groups: list[list[list[int]]], n: int = DISTINCT_N) -> float:
    """Mean over prompts of (distinct n-grams / n-grams) across that prompt's samples; prompts without an n-gram
    are left out (NaN when none has one)."""
    vals = []
    for samples in groups:
        grams = [tuple(ids[i:i + n]) for ids in samples for i in range(len(ids) - n + 1)]
        if grams:
            vals.append(len(set(grams)) / len(grams))
    return float(np.mean(vals)) if vals else float("nan")


def headroom(pass_at_k: dict[str, float | None]) -> Check:
    """pass@k − pass@1 at the largest k: near zero while pass@1 has room means every sample says the same."""
    ks = sorted((int(str(k).split("@")[-1]), v) for k, v in pass_at_k.items() if v is not None)
    if len(ks) < 2 or ks[0][0] != 1:
        return Check("collapse: pass@k headroom", False, "n/a (needs pass@1 and a larger k)", {})
    (k, pk), p1 = ks[-1], ks[0][1]
    room = pk - p1
    fired = room < HEADROOM_MIN and PASS_LO < p1 < PASS_HI
    line = f"pass@{k} − pass@1 = {pk:.3f} − {p1:.3f} = {room:+.3f}"
    line += (f" (below {HEADROOM_MIN} while pass@1 has room: the samples agree; diversity has collapsed)"
             if fired else "")
    return Check("collapse: pass@k headroom", fired, line, {"k": k, "pass_at_k": pk, "pass_at_1": p1, "headroom": room})


def distinct(groups: list[list[list[int]]]) -> Check:
    d = distinct_n(groups)
    fired = bool(np.isfinite(d) and d < DISTINCT_MIN)
    line = f"distinct-{DISTINCT_N} within each prompt's samples: {d:.3f}" + (
        f" (below {DISTINCT_MIN}: the samples of a prompt repeat each other)" if fired else "")
    return Check(f"collapse: distinct-{DISTINCT_N}", fired, line, {"distinct_n": d, "n": DISTINCT_N})


def entropy(h_student: list[np.ndarray]) -> Check:
    """``h_student``: per rollout, the student's entropy at each position. A rollout whose summed entropy
    Σ_t H_t is below ENTROPY_MIN nats can hardly leave the greedy path; fires when more than COLLAPSED_SHARE of
    the rollouts are like that (a near-deterministic policy: sampling more will not explore)."""
    seq = np.array([float(np.nansum(np.asarray(h, np.float64))) for h in h_student])
    flat = np.concatenate([np.asarray(h, np.float64) for h in h_student]) if h_student else np.array([])
    flat = flat[np.isfinite(flat)]
    mean = float(flat.mean()) if flat.size else float("nan")
    share = float((seq < ENTROPY_MIN).mean()) if seq.size else float("nan")
    fired = bool(seq.size and share > COLLAPSED_SHARE)
    line = (f"mean student entropy {mean:.3f} nats per token; {share:.1%} of {seq.size} rollouts sum to below "
            f"{ENTROPY_MIN} nats" + (f" (above {COLLAPSED_SHARE:.0%}: near-deterministic sampling)" if fired else ""))
    return Check("collapse: entropy", fired, line, {"mean_entropy": mean, "low_entropy_share": share,
                                                    "n_rollouts": int(seq.size)})


def answer_positions(tokens: list[str], answer: str | None) -> np.ndarray:
    """``[L]`` bool: the tokens whose text overlaps the last occurrence of ``answer`` in the completion (the tokens'
    texts joined); none where there is no answer or it is not written there."""
    text = "".join(tokens)
    if not answer or answer not in text:
        return np.zeros(len(tokens), bool)
    start = text.rindex(answer)
    ends = np.cumsum([len(t) for t in tokens])
    starts = ends - np.array([len(t) for t in tokens], dtype=ends.dtype)
    return (ends > start) & (starts < start + len(answer)) & (ends > starts)  # an empty token covers no text


def answer_signal(mass: dict[str, tuple[float, float, int, int]]) -> Check:
    """``mass``: config -> (its JSD summed over the final answer's tokens, over all tokens, the number of answer
    tokens, of tokens), over the rollouts whose answer is written in them. Fires for every config whose answer tokens,
    at most ANSWER_TOKENS_MAX of the tokens, carry more than ANSWER_SIGNAL_MAX of its JSD: such a teacher differs from
    the student at the answer, not along the steps that lead to it (a teacher shown only the answer), so training on
    it pushes the answer without the reasoning."""
    shares = {c: (a / t if t > 0 else float("nan"), n_a / n if n else float("nan")) for c, (a, t, n_a, n) in
              mass.items()}
    if not shares:
        return Check(ANSWER_CHECK, False, "n/a (no rollout writes its extracted answer, or no config has "
                                                  "per-token JSD)", {})
    fired = {c: x for c, x in shares.items() if x[0] > ANSWER_SIGNAL_MAX and x[1] <= ANSWER_TOKENS_MAX}
    if fired:
        line = "; ".join(f"{c} puts {a:.0%} of its JSD on the final answer's tokens ({n:.1%} of tokens)"
                         for c, (a, n) in fired.items())
        line += ": it teaches the answer more than the steps"
    else:
        c, (a, n) = max(shares.items(), key=lambda kv: kv[1][0] if np.isfinite(kv[1][0]) else -1.0)
        line = (f"no config puts more than {ANSWER_SIGNAL_MAX:.0%} of its JSD on the final answer's tokens (highest: "
                f"{c} {a:.1%}, on {n:.1%} of tokens)")
    return Check(ANSWER_CHECK, bool(fired), line,
                 {"answer_share": {c: a for c, (a, _) in shares.items()},
                  "answer_tokens": {c: n for c, (_, n) in shares.items()}, "fired": sorted(fired)})


def sampler_mismatch(block: dict | None) -> Check | None:
    """The summary's ``sampler_mismatch`` block (core.sampler_mismatch) as a line; None for a sampled run."""
    if block is None:
        return None
    if block.get("status") != "ok":
        return Check("sampler log-probs", False, f"n/a ({block.get('status')})", block)
    th = block["thresholds"]
    line = (f"student − sampler log-prob: mean |d| {block['mean_abs']:.4f} nats, {block['share_over']:.1%} of "
            f"{block['n_tokens']} tokens over {th['token_tol']:g}, max |d| {block['max_abs']:.3f}; mean |d| by "
            "position " + ", ".join(f"{b['positions']} {b['mean_abs']:.4f}" for b in block["buckets"]))
    if block["fired"]:
        line += (f" (above {th['mean_abs_max']:g} mean or {th['share_max']:.0%} of tokens: the engine and the "
                 "trainer disagree)")
    return Check("sampler log-probs", bool(block["fired"]), line, block)
