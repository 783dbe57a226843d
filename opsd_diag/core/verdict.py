"""The verdict: will this config (teacher x context x signal) help the student? One explicit rule.

Inputs, per config and signal, each a 95% bootstrap interval over prompts (estimate [lo, hi]):

- A    teacher advantage A_T = Σ_k (q̃_k − p̃_k) Ŝ_k at the ideal-gradient nodes of incorrect
       rollouts (all nodes when those cover fewer than 5 prompts);
- C    mean alignment cos(g*, d) between the ideal direction and the signal's direction, same nodes;
- G    teacher-with-context accuracy minus student accuracy (sampled from the teacher view);
- keep the share of the informative tokens (|a_opd| and |a_delta| above 1e-4) where a_delta and
       a_opd agree in sign, which matters for the OPD² signal (a_d2) only: it says how much of that
       signal survives its gate.

The rule:

- **hurts**   if A.hi < 0 (following the teacher lowers success where the student is unsure), or
              C.hi < 0 (the signal pushes against the ideal direction), or
              G.hi < 0 and A.estimate is not > 0 (the teacher with this context is worse and no
              node-level evidence says otherwise);
- **helps**   if not hurts, A.lo > 0 and C.lo > 0, G.estimate >= 0 or unknown, and, for a_d2,
              keep >= 0.5;
- **unclear** otherwise, including when the ideal-gradient estimate is missing.

An interval resampled from fewer than 5 prompts is no evidence (a bootstrap over one prompt is a
single point) and counts as missing; A and C come from all nodes when the incorrect rollouts'
nodes cover fewer than 5 prompts.

Score (the ranking): the mean first-order gain ⟨g*, d/|d|⟩ over all nodes, i.e. the success
probability gained per unit logit step along the signal at the student's uncertain tokens
(our estimator; NaN when it is missing, ranked last). The thresholds are a first, explicit
heuristic; how often the verdicts were right on the bundled world is measured by the pre-registered
study in benchmarks/validity/ (docs/verdict.md); no calibration on real models yet.
"""

from __future__ import annotations

import math

MIN_PROMPTS = 5
SIGNALS = {"rev_kl": "reverse KL", "fwd_kl": "forward KL", "jsd": "JSD", "r_opd": "sampled-token OPD",
           "a_d2": "OPD² delta", "a_ex": "ExOPD"}
MIN_GATE_KEEP = 0.5
SYMBOLS = {  # the rule's symbols, as the pages explain them in place (the module docstring above)
    "A": "teacher advantage A_T: how much following the teacher raises the student's success where it is unsure",
    "C": "alignment: mean cosine between the ideal gradient and this signal's update direction",
    "G": "accuracy gap: teacher with its context minus the student (sampled answers)",
    "keep": "OPD² gate keep: share of informative tokens where a_delta and a_opd agree in sign (a_d2 only)",
}


def _enough(ci: dict | None) -> dict | None:
    """The interval, or None when it rests on too few prompts to be evidence."""
    if ci is None or (ci.get("n_prompts") is not None and ci["n_prompts"] < MIN_PROMPTS):
        return None
    return ci


def _get(ci: dict | None, key: str) -> float:
    v = None if ci is None else ci.get(key)
    return math.nan if v is None else float(v)


def _fmt(ci: dict | None) -> str:
    est, lo, hi = _get(ci, "estimate"), _get(ci, "lo"), _get(ci, "hi")
    return "n/a" if math.isnan(est) else f"{est:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def verdict(config_summary: dict) -> dict:
    """{"verdict": "helps" | "unclear" | "hurts", "reason": one sentence, "score": float}.

    ``config_summary`` keys (CI dicts have estimate/lo/hi and optionally n_prompts; any may be
    None): ``teacher_advantage``, ``alignment``, ``gain`` (the score), ``accuracy_gap``,
    ``gate_keep`` (float), ``signal``.
    """
    a, c, g = (_enough(config_summary.get(k)) for k in ("teacher_advantage", "alignment", "accuracy_gap"))
    keep = config_summary.get("gate_keep")
    signal = config_summary.get("signal", "")
    name = SIGNALS.get(signal, signal or "the signal")
    score = _get(config_summary.get("gain"), "estimate")
    a_est, a_lo, a_hi = _get(a, "estimate"), _get(a, "lo"), _get(a, "hi")
    c_lo, c_hi = _get(c, "lo"), _get(c, "hi")
    g_est, g_hi = _get(g, "estimate"), _get(g, "hi")

    def out(v: str, reason: str) -> dict:
        return {"verdict": v, "reason": reason, "score": score}

    if a_hi < 0:
        return out("hurts", f"following the teacher lowers the student's success at its uncertain tokens "
                            f"(teacher advantage {_fmt(a)}).")
    if c_hi < 0:
        return out("hurts", f"the {name} update points against the ideal gradient (alignment {_fmt(c)}).")
    if g_hi < 0 and not a_est > 0:
        return out("hurts", f"the teacher with this context is less accurate than the student "
                            f"(accuracy gap {_fmt(g)}) and no node shows a teacher advantage.")
    if math.isnan(a_est):
        return out("unclear", f"no ideal-gradient estimate over at least {MIN_PROMPTS} prompts (predictor skipped, "
                              f"budget too small or too few prompts); accuracy gap {_fmt(g)}.")
    if math.isnan(_get(c, "estimate")):
        return out("unclear", f"the alignment of {name} is undefined: no node where the candidate tokens differ "
                              f"in success{', or no base model' if signal == 'a_d2' else ''}.")
    if a_lo > 0 and c_lo > 0 and not g_est < 0:
        if signal == "a_d2" and keep is not None and not keep >= MIN_GATE_KEEP:
            return out("unclear", f"teacher advantage and alignment are positive but the OPD² gate keeps only "
                                  f"{keep:.0%} of tokens.")
        return out("helps", f"the teacher raises success at the student's uncertain tokens (teacher advantage "
                            f"{_fmt(a)}) and {name} follows the ideal gradient (alignment {_fmt(c)}).")
    if a_lo > 0 and c_lo > 0:
        return out("unclear", f"node-level evidence is positive but the teacher with this context is less "
                              f"accurate than the student (accuracy gap {_fmt(g)}).")
    open_ = [n for n, lo, hi in (("teacher advantage", a_lo, a_hi), ("alignment", c_lo, c_hi)) if not lo > 0]
    which = ("both intervals include zero" if len(open_) == 2 else f"the {open_[0]} interval includes zero"
             if open_ else "the evidence is mixed")
    return out("unclear", f"{which} (teacher advantage {_fmt(a)}, alignment {_fmt(c)}).")


VERDICT_ORDER = {"helps": 0, "unclear": 1, "hurts": 2}


def rank(configs: list[dict]) -> list[dict]:
    """Configs sorted by verdict (helps, unclear, hurts), then score (highest first; NaN last), stable.

    The verdict leads because it is the decision: a ``hurts`` config can have a positive score
    (its signal pushes away from wrong sampled tokens) and must not be recommended above a ``helps`` one.
    """
    def key(entry):
        s = entry.get("score")
        s = math.nan if s is None else float(s)
        return (VERDICT_ORDER.get(entry.get("verdict"), 1), math.isnan(s), -s if not math.isnan(s) else 0.0)
    return sorted(configs, key=key)


def collect(summary: dict, ideal: dict | None) -> dict[tuple[str, str], dict]:
    """Verdict inputs per (config, signal) from a run's ``summary.json`` and the ideal result."""
    out = {}
    ideal_cfgs = (ideal or {}).get("configs") or {}
    for config, entry in (summary.get("configs") or {}).items():
        node = ideal_cfgs.get(config)
        keep = (entry.get("alignment") or {}).get("sign_agreement")
        for signal in SIGNALS:
            a = c = g = None
            if node:
                split = "incorrect" if (node["teacher_advantage"]["incorrect"].get("n_prompts") or 0) >= MIN_PROMPTS \
                    else "all"
                a = node["teacher_advantage"][split]
                c = node["alignment"][signal][split]["mean"]
                g = node["gain"][signal]["all"]
            out[(config, signal)] = {"teacher_advantage": a, "alignment": c, "gain": g, "signal": signal,
                                     "accuracy_gap": entry.get("teacher_minus_student_accuracy"), "gate_keep": keep}
    return out


def verdicts(summary: dict, ideal: dict | None) -> dict:
    """{"verdicts": {config: {signal: verdict}}, "ranking": [{config, signal, verdict, score}, ...]}."""
    table: dict[str, dict] = {}
    flat = []
    for (config, signal), inputs in collect(summary, ideal).items():
        v = verdict(inputs)
        table.setdefault(config, {})[signal] = v
        flat.append({"config": config, "signal": signal, "verdict": v["verdict"], "score": v["score"]})
    return {"verdicts": table, "ranking": rank(flat), "verdict_rule": rule_text()}


def rule_text() -> str:
    """The rule as written in this module's docstring (shown next to every verdict)."""
    return __doc__.split("The rule:")[1].split("Score (the ranking)")[0].strip()
