"""The failure checks of a finished run (``Run.failure_checks``): its tables, config and summary handed to the pure
checks of ``core.failure_checks``, in the order ``opsd-diag report``, the HTML report and the app's Overview show
them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from opsd_diag.core import failure_checks as fc


def special_ids(tok) -> set[int] | None:
    """The ids a chat template writes as markers: the tokenizer's special and added tokens (None: no tokenizer)."""
    if tok is None:
        return None
    return set(tok.all_special_ids) | set(getattr(tok, "added_tokens_decoder", {}) or {})


def for_run(run, tokenizer=None) -> list[fc.Check]:
    """Every check on ``run`` (an ``opsd_diag.run.Run``); ``tokenizer``: the student's, for the template check
    (default ``run.tokenizer()``; without one that check says n/a)."""
    s, m = run.summary, run.manifest
    tokens, rollouts = run.tokens, run.rollouts
    by_config = dict(tuple(tokens.groupby("config", sort=False)))
    # a teacher with another tokenizer is scored per span: its id-by-id divergences are n/a (docs/signals.md)
    cross = {c for c, t in by_config.items() if t["kl_rev"].isna().all()}
    values = {(c, sig): t[sig].to_numpy() for c, t in by_config.items() for sig in fc.LOSS_SIGNALS if sig in t}
    truncated = rollouts["truncated"] if "truncated" in rollouts else ~rollouts["finished"]
    temps = [m.get(k) for k in ("sampling_temperature", "scoring_temperature")]  # as the manifest states them
    checks = [fc.dead_signal(values), fc.temperature(*temps) if all(isinstance(t, (int, float)) for t in temps)
              else fc.Check("temperature", False, "n/a (the manifest states no temperatures)", {}),
              fc.truncation(truncated.to_numpy(bool), dict(s.context_truncated), rollouts["problem_index"].nunique())]
    special = special_ids(tokenizer if tokenizer is not None else run.tokenizer())
    if special is None or "prompt_ids.student" not in rollouts:
        checks.append(fc.Check("chat template", False, "n/a (the student's tokenizer or prompt ids are not here)", {}))
    else:
        first = rollouts.sort_values("rollout_id").drop_duplicates("problem_index")
        same = [c for c in run.configs if c not in cross and f"prompt_ids.{c}" in first]
        differs = int((rollouts["sampler_prompt"] == "differs").sum()) if "sampler_prompt" in rollouts else 0
        n_sampler = len(rollouts) if "sampler_prompt" in rollouts else 0
        checks.append(fc.template([list(p) for p in first["prompt_ids.student"]],
                                  {c: [list(p) for p in first[f"prompt_ids.{c}"]] for c in same}, special,
                                  differs, n_sampler))
    groups = [[list(ids) for ids in g] for _, g in rollouts.groupby("problem_index")["completion_ids"]]
    own = next((c for c in run.configs if c not in cross), None)
    h = [] if own is None else [g.to_numpy() for _, g in by_config[own].groupby("rollout_id")["h_s"]]
    checks += [fc.headroom(dict(s.pass_at_k)), fc.distinct(groups), fc.entropy(h)]
    checks.append(fc.answer_signal(answer_mass(by_config, rollouts, [c for c in run.configs if c not in cross])))
    mismatch = fc.sampler_mismatch(s.sampler_mismatch)
    return checks + ([mismatch] if mismatch is not None else [])


def answer_mass(by_config: dict[str, pd.DataFrame], rollouts: pd.DataFrame, configs: list[str]) -> dict:
    """``core.failure_checks.answer_signal``'s input: per config (same tokenizer as the student), its JSD on the final
    answer's tokens and on all tokens, and both token counts, over the rollouts whose extracted answer (``answer_pred``)
    is written in their tokens' text."""
    if not configs or "answer_pred" not in rollouts:
        return {}
    answers = rollouts.set_index("rollout_id")["answer_pred"]
    rids, positions = [], []
    for rid, g in by_config[configs[0]].sort_values("pos").groupby("rollout_id", sort=False):
        ans = answers.get(rid)
        m = fc.answer_positions(g["token"].astype(str).tolist(), ans if isinstance(ans, str) else None)
        if m.any():
            rids += [rid] * int(m.sum())
            positions.append(g["pos"].to_numpy()[m])
    if not rids:
        return {}
    spans = pd.DataFrame({"rollout_id": rids, "pos": np.concatenate(positions), "answer": True})
    out = {}
    for c in configs:
        t = by_config[c]
        t = t[t["rollout_id"].isin(spans["rollout_id"].unique())].merge(spans, on=["rollout_id", "pos"], how="left")
        on = t["answer"].eq(True).to_numpy()
        v = t["jsd"].to_numpy(float)
        out[c] = (float(np.nansum(v[on])), float(np.nansum(v)), int(on.sum()), len(t))
    return out


def cautions(checks: list[fc.Check]) -> dict[str, str]:
    """Config -> what a failure check that fired for it says (today the answer-only signal): the decision panel's
    caution when it recommends that config, and why the answer guard passes it over."""
    c = next((c for c in checks if c.name == fc.ANSWER_CHECK and c.fired), None)
    if c is None:
        return {}
    n = c.numbers
    return {k: (f"the failure checks find {k}'s signal on the final answer ({n['answer_share'][k]:.0%} of "
                f"its JSD on {n['answer_tokens'][k]:.1%} of the tokens): it teaches the answer more than the steps "
                "(docs/design.md#failure-checks)") for k in n["fired"]}


def lines(checks: list[fc.Check]) -> list[str]:
    """The checks as the report prints them, one line each."""
    return [c.text() for c in checks]


def mismatch_frame(block: dict | None):
    """summary.json's ``sampler_mismatch`` block as a frame: one row overall, then one per position bucket; None for
    a sampled run or a file without log-probs."""
    if not block or block.get("status") != "ok":
        return None
    keys = ("n_tokens", "mean", "mean_abs", "max_abs", "share_over")
    return pd.DataFrame([{"positions": "all", **{k: block[k] for k in keys}}, *block["buckets"]])
