"""The checks' figures in words: the sentences CHECKS.md and the model file's ``checks`` record share (the decision
panel quotes the latter). Pure functions of the figures ``report_checks.analysis()`` computes; no file is read."""

from __future__ import annotations

from benchmarks.validity.v2.report_v2 import fmt


def product_key(ranking: str) -> str:
    """The figures' key of the product's ranking by ``ranking`` (``check_world.figures`` names it so)."""
    return f"product ({ranking})"


def listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def in_force_words(d: dict, ranking: str) -> list[str]:
    """The subtotal of the worlds checked with the model file as it stands (``in_force``)."""
    if not d["worlds"]:
        return []
    f, ms, rec = fmt, d["mean_spearman"], d["recommended_mean"]
    return ["", f"Of these, the {len(d['worlds'])} checked with the model file as it now stands ({listed(d['worlds'])}"
                f"; last changed by look {d['since_look']}): the product ranking {f(ms[product_key(ranking)])}, G alone "
                f"{f(ms['accuracy_gap'])}, {d['method_order'][0]} of {d['method_order'][1]} method pairs right, the "
                "recommended row " + (f"{rec['product']:+.3f} on average (the best row {rec['best']:+.3f})."
                                      if rec["product"] is not None else "none (no G > 0).")]


def forgetting_words(d: dict) -> str:
    """What the forgetting column ranks well and what it does not (``forgetting_by_set``): the decision panel says it
    beside the predicted forgetting."""
    f, skill, easy = fmt, d["second_skill"], d["easy_levels"]
    return (f"the forgetting column ranked the realised change at {f(easy['spearman'])} pooled where the forgetting set "
            f"was the task's own easy levels ({easy['worlds']} worlds), {f(skill['spearman'])} where it was a second "
            f"skill the training never shows ({skill['worlds']} worlds): it follows the predicted gain, so measure a "
            "skill you fear losing (a training.eval.regression set) rather than read it here.")


def since_sentence(s8: dict) -> str:
    """The decision panel's summary of the worlds built after the ranking in force (``s8["ranking"]``) shipped."""
    if not s8["per_world"]:
        return ""
    ms, f, worlds, ranking = s8["mean_spearman"], fmt, list(s8["per_world"]), s8["ranking"]
    return (f"The ranking in force ({ranking}), checked on the {len(worlds)} world{'s' * (len(worlds) != 1)} built "
            f"after it shipped, with no refit, each with the model file as it then stood (before the sixteenth look, "
            f"the first look's gain model; benchmarks/validity/v2/CHECKS.md): a mean within-world Spearman with the "
            f"realised pass@1 change of {f(ms[product_key(ranking)])}, G alone {f(ms['accuracy_gap'])} (the difference "
            f"{s8['paired_vs_g']['estimate']:+.3f} [{s8['paired_vs_g']['lo']:+.3f}, {s8['paired_vs_g']['hi']:+.3f}], 95% "
            "over worlds); it ordered "
            f"{s8['method_order'][0]} of {s8['method_order'][1]} method pairs right, and the row it recommends "
            f"(best-ranked with G > 0) realised {s8['recommended_mean']['product']:+.3f} on average (the best row "
            f"{s8['recommended_mean']['best']:+.3f}, the ranking by G's {s8['recommended_mean']['by_g']:+.3f}). "
            f"Across those worlds the recommended row's predicted gain against what it realised: Spearman "
            f"{f(s8['recommended_size'])}. " + size_words(s8) + verdict_words(s8)
            + in_force_sentence(s8["in_force"], s8["ranking"]))


def in_force_sentence(d: dict, ranking: str) -> str:
    """The model file's own record: the worlds checked with it as it stands."""
    if not d["worlds"]:
        return ""
    n, ms = len(d["worlds"]), d["mean_spearman"]
    return (f" With the model file as it stands (since look {d['since_look']}), on the {n} world{'s' * (n != 1)} "
            f"checked with it: {fmt(ms[product_key(ranking)])}, G alone {fmt(ms['accuracy_gap'])}.")


def verdict_words(s8: dict) -> str:
    """How often the verdict column decided on those worlds: the ranking, not the verdict, is the decision."""
    v = s8["verdict"]
    return (f" The verdict was unclear on {v['unclear_share']:.0%} of their rows (right on {v['n_correct']} of its "
            f"{v['n_decisive']} decisive calls): there the ranking decides, not the verdict. Its 95% intervals held "
            f"the realised change on {v['coverage']:.0%} of the rows (the issue asks 85% to 98%), but at a median width "
            f"of {v['median_width']:.2f} they rarely lie wholly above +{v['delta']:.2f} or below -{v['delta']:.2f}, as a "
            "decisive call needs.")


def size_words(s8: dict) -> str:
    """What the across-world Spearman of the recommended row's prediction means for a reader of the headline."""
    r = s8["recommended_size"]
    return ("The prediction tracked how much the recommendation helped." if r is not None and r >= 0.5 else
            "The prediction orders the rows of a diagnosis; it did not say how much the recommendation would help.")
