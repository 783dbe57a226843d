"""The lever study's looks at target 3 (a mask keeping <= 50% of the tokens keeps the gain and costs <= 0.7x the
time per step), each added to the committed analysis by ``report_levers.py --look N``: the seventh (amendment 8, a
position window) and the tenth (amendment 11, the most surprising rollouts), with their rows, judgement and text."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.levers.rows import world_rows  # noqa: E402
from opsd_diag.core.stats import ci_text  # noqa: E402


def target3_rows(plan: dict, key: str, setting: str, root: Path, committed: dict | None = None) -> dict:
    """Target 3's rows of a look (amendments 8, 11): per world, ``setting`` against all-token training run again
    beside it (gain kept, trained-token share, Δpass@4 against all's), and how often the rerun repeated the
    committed all-token Δpass@1."""
    look = plan[key]
    out = {}
    for world in look["worlds"]:
        wr = world_rows(plan, root, world, list(look["settings"]), look["seeds"])
        st = wr.get("settings", {})
        if wr.get("status") != "ok" or any(st.get(k, {}).get("status") != "ok" for k in look["settings"]):
            out[world] = {"status": wr.get("status") if wr.get("status") != "ok" else "a run did not finish",
                          "rows": wr}
            continue
        a, p = st["all"], st[setting]
        g_all, g = a["d_pass1"]["estimate"], p["d_pass1"]["estimate"]
        share = p["kept_tokens"] / a["tokens"]  # trained tokens against whole rollouts (same seeds, steps)
        out[world] = {"status": "ok", setting: p, "d_pass1_all": g_all, "d_pass1": g,
                      "gain_kept": bool(g >= g_all - 0.1 * max(g_all, 0.0)), "share": share,
                      "share_at_most_half": share <= 0.5, "d_pass4_minus_all": p["vs_all"]["d_pass4"]}
    ok = [w for w in out.values() if w["status"] == "ok"]
    same = [w for w, r in out.items() if r["status"] == "ok" and abs(
        r["d_pass1_all"] - (committed or {}).get(w, {}).get("settings", {}).get("all", {}).get("d_pass1", {}).get(
            "estimate", math.inf)) < 1e-9]
    return {"worlds": out, "n_worlds": len(look["worlds"]), "gain_kept": sum(w["gain_kept"] for w in ok),
            "all_rerun_as_committed": len(same), "share_at_most_half": sum(w["share_at_most_half"] for w in ok)}


def judged(f: dict, time_ratio: float | None) -> dict:
    """Target 3 met only if the gain is kept and the share at most half in every world, and the time <= 0.7x."""
    complete = all(r["status"] == "ok" for r in f["worlds"].values())
    gain = complete and f["gain_kept"] == f["n_worlds"]
    share = complete and f["share_at_most_half"] == f["n_worlds"]
    fast = time_ratio is not None and time_ratio <= 0.7
    return {"gain": gain, "share": share, "time": fast, "target": gain and share and fast}


def seventh_look(plan: dict, root: Path, bench: dict | None, committed: dict | None = None) -> dict:
    """Amendment 8: target 3 with position_half (a window known before any model runs, sampled only to its end)
    against all-token training run again beside it, in every world; the time (sampling + step) from
    ``bench_step.py --position-end``."""
    f = target3_rows(plan, "seventh_look", "position_half", root, committed)
    for w, r in f["worlds"].items():
        if r["status"] == "ok":
            r["end"] = plan["seventh_look"]["half"][w]
    time_ratio = None if not bench or "position_half" not in bench.get("ratio_sampling_plus_step", {}) else \
        bench["ratio_sampling_plus_step"]["position_half"]
    return {**f, "time_ratio": time_ratio, "bench": None if not bench else {k: v for k, v in bench.items() if k != "raw"},
            "met": judged(f, time_ratio)}


def tenth_look(plan: dict, root: Path, bench: dict | None, committed: dict | None = None) -> dict:
    """Amendment 11: target 3 with surprising_half (each micro-batch's most surprising rollouts up to half of its
    tokens, dropped before the step's models run) in the twelve worlds; the time judged is the step alone, sampling
    + step reported beside it; the mean Δpass@1 over the worlds against all's reported, not judged."""
    f = target3_rows(plan, "tenth_look", "surprising_half", root, committed)
    ok = [r for r in f["worlds"].values() if r["status"] == "ok"]
    ratio = (bench or {}).get("ratio_step", {}).get("surprising_half")
    return {**f, "time_ratio": ratio,
            "time_ratio_with_sampling": (bench or {}).get("ratio_sampling_plus_step", {}).get("surprising_half"),
            "bench": None if not bench else {k: v for k, v in bench.items() if k != "raw"},
            "mean_d_pass1": float(np.mean([r["d_pass1"] for r in ok])) if ok else math.nan,
            "mean_d_pass1_all": float(np.mean([r["d_pass1_all"] for r in ok])) if ok else math.nan,
            "met": judged(f, ratio)}


def _render_target3(f: dict, setting: str, heading: str, timing: str, extra: str = "") -> list[str]:
    """A target-3 look's table (with the window's end E where the setting has one) and its judgement line."""
    with_end = any("end" in r for r in f["worlds"].values())
    L = [heading, "", "| world |" + (" E |" if with_end else "") + f" all's Δpass@1 | {setting}'s Δpass@1 | keeps the "
         "gain | trained tokens / all's | Δpass@4 − all's |", "|---|" + "---|" * (5 + with_end)]
    for w, r in f["worlds"].items():
        if r["status"] != "ok":
            L.append(f"| {w} | not analysed: {r['status']} |" + " |" * (4 + with_end))
            continue
        L.append(f"| {w} | " + (f"{r['end']} | " if with_end else "") + f"{r['d_pass1_all']:+.3f} | "
                 f"{r['d_pass1']:+.3f} | {'yes' if r['gain_kept'] else 'no'} | {r['share']:.2f} | "
                 f"{ci_text(r['d_pass4_minus_all'], 3)} |")
    m = f["met"]
    L += ["", f"Gain kept (Δpass@1 ≥ all's − 10% of all's gain) in {f['gain_kept']} of {f['n_worlds']} worlds; trained "
          f"tokens ≤ half of all's in {f['share_at_most_half']} of {f['n_worlds']}; time: {timing}. Target 3 by "
          f"{setting}: {'met' if m['target'] else 'not met'} (gain {'met' if m['gain'] else 'not met'}, share "
          f"{'met' if m['share'] else 'not met'}, time {'met' if m['time'] else 'not met'}).{extra} All-token "
          f"training run again gave the committed Δpass@1 in {f['all_rerun_as_committed']} of {f['n_worlds']} "
          "worlds.", ""]
    return L


def render_seventh_look(f: dict) -> list[str]:
    """Target 3 again (amendment 8): position_half beside all-token training in every world."""
    b = f["bench"]
    timing = ("not measured" if f["time_ratio"] is None else
              f"sampling + step {f['time_ratio']:.2f}× all-token training's (sampling to E {b['sampling_cut_s']:.3f} s "
              f"against {b['sampling_s']:.3f} s; the step alone {b['ratio_step']['position_half']:.2f}×; median of "
              f"{b['repeats']} side-by-side repeats, `bench_step.py --position-end {b['position_end']}`, one thread)")
    return _render_target3(f, "position_half", "**3b. Seventh look (amendment 8): target 3 with a position window known "
                           "before any model runs.** `position_half` trains the first E tokens of each rollout (E: half "
                           "the median length of the world's diagnosis rollouts), sampled only to E; all-token training "
                           "run again beside it, seeds 0 and 1.", timing)


def render_tenth_look(f: dict) -> list[str]:
    """Target 3 a last time (amendment 11): surprising_half beside all-token training in every world."""
    b = f["bench"]
    timing = ("not measured" if f["time_ratio"] is None else
              f"the step alone {f['time_ratio']:.2f}× all-token training's (kept share "
              f"{b['kept_share']['surprising_half']:.2f}; sampling + step {f['time_ratio_with_sampling']:.2f}×, not "
              f"judged: sampling {b['sampling_s']:.3f} s is unchanged; median of {b['repeats']} side-by-side repeats, "
              f"`bench_step.py`, one thread)")
    return _render_target3(f, "surprising_half", "**3c. Tenth look (amendment 11): target 3 with a rollout-level mask "
                           "known before the step's models run.** `surprising_half` keeps each micro-batch's rollouts of "
                           "largest mean sampling-time surprisal, up to half of its tokens; all-token training run again "
                           "beside it, seeds 0 and 1.", timing,
                           f" Mean Δpass@1 over the worlds {f['mean_d_pass1']:+.3f} against all's "
                           f"{f['mean_d_pass1_all']:+.3f} (reported, not judged).")


def target_lines(a: dict) -> list[str]:
    """The Targets section's lines of the looks at target 3 in the analysis ``a``."""
    L = []
    if "seventh_look" in a:
        m = a["seventh_look"]["met"]
        L.append(f"- the same target with position_half (seventh look, section 3b): {'met' if m['target'] else 'not met'} "
                 f"(gain in {a['seventh_look']['gain_kept']} of {a['seventh_look']['n_worlds']} worlds, trained tokens "
                 f"≤ half in {a['seventh_look']['share_at_most_half']}, time "
                 + ("not measured" if a["seventh_look"]["time_ratio"] is None else
                    f"{a['seventh_look']['time_ratio']:.2f}×") + ").")
    if "tenth_look" in a:
        f = a["tenth_look"]
        L.append(f"- the same target with surprising_half (tenth look, section 3c, the last look at it): "
                 f"{'met' if f['met']['target'] else 'not met'} (gain in {f['gain_kept']} of {f['n_worlds']} worlds, "
                 f"trained tokens ≤ half in {f['share_at_most_half']}, the step alone "
                 + ("not measured" if f["time_ratio"] is None else f"{f['time_ratio']:.2f}×") + ").")
    return L
