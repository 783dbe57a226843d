"""The lever recommendation of a diagnosis (``lookahead.levers``, computed by ``engine.levers``) as a table and
as the report's lines: ``Run.levers()`` (``LeverView``) and ``opsd-diag report``."""

from __future__ import annotations

import pandas as pd

from opsd_diag.core.stats import ci_text

# Run.levers(): one row per candidate token mask (docs/training.md#the-diagnosis-lever-recommendation)
COLUMNS = {
    "setting": "the candidate's name (config.levers.CANDIDATES)",
    "token_mask": "its `training.token_mask` section, as YAML flow text ({} is all tokens)",
    "kept_share": "share of the step half's tokens the mask keeps",
    "signal_share": "share of the summed |signal| (the method's advantage, or its per-token divergence) on them",
    "dll": "lookahead Δll with the mask: change of the correct-minus-incorrect log-likelihood gap",
    "dll_lo": "its 95% interval, low end",
    "dll_hi": "its 95% interval, high end",
    "dll_vs_all": "dll minus all-token training's, prompt by prompt (the mean over the measurement prompts where "
                  "both are finite)",
    "dll_vs_all_lo": "its 95% interval over those prompts, low end",
    "dll_vs_all_hi": "its 95% interval, high end",
    "dv": "lookahead success change with the mask (importance-weighted)",
    "kl": "lookahead KL to the initial student per token",
    "alignment": "the signal's ideal-gradient alignment on the kept tokens: mean cos(g*, d) of the method's objective "
                 "over the nodes whose token the mask keeps (needs `ideal`; NaN without nodes)",
    "alignment_lo": "its 95% interval over prompts, low end",
    "alignment_hi": "its 95% interval, high end",
    "forgetting_pass1": "change of pass@1 on the forgetting set after the steps with the mask (needs "
                        "`lookahead.forgetting`; NaN without it), as the lookahead's `forgetting_pass1`",
    "forgetting_pass1_lo": "its 95% interval over problems, low end",
    "forgetting_pass1_hi": "its 95% interval, high end",
    "recommended": "the recommendation: the largest dll_vs_all whose interval lies above 0, else all tokens",
}


def _flow(d: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in d.items()) + "}"


def frame(levers: dict | None) -> pd.DataFrame | None:
    """The table of a summary's ``levers`` entry, or None without one."""
    if not levers or levers.get("status") != "ok":
        return None
    best = (levers.get("recommendation") or {}).get("setting")
    rows = [{"setting": k, "token_mask": _flow(v["token_mask"]), "kept_share": v["kept_share"],
             "signal_share": v["signal_share"], "dll": v["dll"].get("estimate"), "dll_lo": v["dll"].get("lo"),
             "dll_hi": v["dll"].get("hi"),
             **{f"dll_vs_all{s}": (v.get("dll_vs_all") or {}).get(k2) for s, k2 in (("", "estimate"), ("_lo", "lo"),
                                                                                  ("_hi", "hi"))},
             "dv": v["dv"].get("estimate"), "kl": v["kl"].get("estimate"),
             **{f"alignment{s}": (v.get("alignment") or {}).get(k2) for s, k2 in (("", "estimate"), ("_lo", "lo"),
                                                                                ("_hi", "hi"))},
             **{f"forgetting_pass1{s}": ((v.get("forgetting") or {}).get("pass@1") or {}).get(k2)
                for s, k2 in (("", "estimate"), ("_lo", "lo"), ("_hi", "hi"))},
             "recommended": k == best} for k, v in levers["settings"].items()]
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    numbers = [c for c in COLUMNS if c not in ("setting", "token_mask", "recommended")]
    out[numbers] = out[numbers].astype(float)
    return out


def text(levers: dict | None) -> list[str]:
    """The report's lines: the recommendation with its interval, beside all-token training's."""
    if not levers:
        return []
    if levers.get("status") != "ok":
        return [f"lever recommendation: {levers.get('reason', 'not computed')}"]
    r = levers.get("recommendation")
    if r is None:
        return ["lever recommendation: none (no candidate has a finite lookahead Δll)"]
    d, a, diff = r.get("dll") or {}, r.get("dll_all") or {}, r.get("dll_vs_all") or {}
    line = (f"lever recommendation for {levers['config']} / {levers['method']}: training.token_mask "
            f"{_flow(r['token_mask'])} ({r['setting']}): lookahead Δll {ci_text(d)}")
    if r["setting"] != "all" and a.get("estimate") is not None:
        line += f", all tokens {ci_text(a)}"
    if r["setting"] != "all" and diff.get("estimate") is not None:
        line += f", difference {ci_text(diff)}"
    if r.get("basis"):
        line += f" ({r['basis']})"
    kept = (levers["settings"][r["setting"]].get("alignment") or {}).get("estimate")
    every = (levers["settings"].get("all", {}).get("alignment") or {}).get("estimate")
    if kept is not None and kept == kept:
        line += f"; signal alignment on its kept tokens {kept:+.3f}" + (
            f" (all tokens {every:+.3f})" if every is not None and every == every else "")
    skipped = [f"{k}: {why}" for k, why in (levers.get("not_run") or {}).items()]
    return [line + " (table: Run.levers())"] + ([f"not looked ahead: {'; '.join(skipped)}"] if skipped else [])


class LeverView:
    """``Run.levers()`` (a mixin of ``run.Run``)."""

    def levers(self) -> pd.DataFrame | None:
        """One row per candidate token mask of the lever recommendation (``COLUMNS``), or None without one."""
        return frame(self.summary.levers)
