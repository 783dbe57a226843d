"""The generated blocks of the hand-written pages (between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``):
per-token columns, the verdict rule, predictor v2 as shipped and its table's columns, figure captions, training
methods, the --from-diagnosis table, levers, schedules, metrics keys and the module map. Used by ``docs/generate.py``."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

from gen_config import cell, first_line

ROOT = Path(__file__).resolve().parents[1]


def columns_block() -> str:
    from opsd_diag import schema

    return schema.markdown_table()


def verdict_block() -> str:
    from opsd_diag.core import verdict

    signals = ", ".join(f"`{k}` ({v})" for k, v in verdict.SIGNALS.items())
    return "\n".join([
        f"Signals judged for every teacher config: {signals}.", "",
        (f"An interval counts as evidence only when it rests on at least `MIN_PROMPTS` = {verdict.MIN_PROMPTS}"
         f" prompts; the OPD² signal `a_d2` is called `helps` only when `keep` is at least `MIN_GATE_KEEP` ="
         f" {verdict.MIN_GATE_KEEP}."), "",
        "The rule, as `rule_text()` returns it (the app and the HTML report show the same text):", "",
        verdict.rule_text()])


def _ci(d: dict | None) -> str:
    if not d or d.get("estimate") is None:
        return "n/a"
    return f"{d['estimate']:+.2f} [{_x(d.get('lo'), '+.2f')}, {_x(d.get('hi'), '+.2f')}]"


def _x(v, fmt: str = "+.3f") -> str:
    return "n/a" if v is None else format(v, fmt)


def predictor_block() -> str:
    """Predictor v2 as shipped: the study's choice, its leave-one-world-out figures against G, the models."""
    from opsd_diag import prediction
    from opsd_diag.core import predictor

    cal = prediction.load()
    if cal is None:
        return ("The shipped model file `opsd_diag/data/predictor_v2.json` is not in this checkout yet "
                "(`python benchmarks/validity/v2/report_v2.py --from DIR` writes it): until it is, the product "
                "shows the v1 rule alone.")
    out = [f"**The study chose `{cal.choice}`**: {cal.reason}. Results: [{cal.study}](../{cal.study}).", "",
           "Leave-one-world-out over the seven outcome worlds (Spearman with the realised Δpass@1, 95% cluster "
           "bootstrap):", "", "| model | pooled Spearman | mean of worlds | decisive calls right | coverage of the "
           "95% intervals | unclear |", "|---|---|---|---|---|---|"]
    for tier, d in cal.lowo.items():
        out.append(f"| `{tier}` | {_ci(d.get('spearman'))} | {_x(d.get('mean_of_worlds'), '+.2f')} | "
                   f"{_x(d.get('decisive_accuracy'), '.2f')} | {_x(d.get('coverage'), '.2f')} | "
                   f"{_x(d.get('unclear_share'), '.2f')} |")
    out += [f"| accuracy gap G alone | {_ci(cal.accuracy_gap)} | | | | |", "",
            f"Verdict rule (delta = {cal.delta:g}): {prediction.rule_text(cal.delta)}", "",
            f"Ranking when the study chose G (G > 0 to recommend; `method_order`): `{cal.method_order}`: "
            + predictor.ORDER_TEXT[cal.method_order].format(scale=cal.sampled_scale), ""]
    if cal.later_looks:
        out += ["Later pre-registered looks, each judged on a world built after its plan (the model file's "
                "`later_looks`):", "", "| look | rule tried | new world | outcome | plan | results |",
                "|---|---|---|---|---|---|"]
        out += [f"| {k} | `{v.get('model')}` | `{v.get('added_world')}` | {cell(v.get('summary', ''))} | "
                f"[plan](../{v.get('plan')}) | [results](../{v.get('study')}) |"
                for k, v in cal.later_looks.items()]
        out.append("")
    for tier, models in cal.models.items():
        if tier not in prediction.TIERS:
            continue
        groups: dict[tuple, list[str]] = {}  # outcomes fitted on the same rows share one standardisation
        for o in prediction.OUTCOMES:
            m = models[o]
            groups.setdefault((tuple(m["features"]), tuple(m["mean"]), tuple(m["sd"])), []).append(o)
        for outcomes in groups.values():
            first = models[outcomes[0]]
            logs = {o for o in outcomes if models[o].get("target") == "log"}
            out += [f"`{tier}`, " + ", ".join(f"`{o}`" for o in outcomes) + f" (ridge, alpha {first.get('alpha')}): "
                    "coefficient per study SD of each feature; a prediction is the intercept plus "
                    "Σ coef × (x − mean) / SD"
                    + (", and exp of that for an outcome marked (ln), fitted to its natural log." if logs else "."),
                    "", "| feature | study mean | study SD | "
                    + " | ".join(f"`{o}`" + (" (ln)" if o in logs else "") for o in outcomes) + " |",
                    "|---|---|---|" + "---|" * len(outcomes)]
            for i, f in enumerate(first["features"]):
                out.append(f"| `{f}` | {_x(first['mean'][i], '.4f')} | {_x(first['sd'][i], '.4f')} | "
                           + " | ".join(_x(models[o]["coef"][i], "+.4f") for o in outcomes) + " |")
            out.append("| intercept | | | " + " | ".join(_x(models[o]["intercept"], "+.4f") for o in outcomes) + " |")
            out.append("| residual band (2.5%, 97.5%) | | | " + " | ".join(
                f"{_x(models[o]['residual_band'][0], '+.3f')}, {_x(models[o]['residual_band'][1], '+.3f')}"
                for o in outcomes) + " |")
            out.append("")
    return "\n".join(out).rstrip()


def features_block() -> str:
    from opsd_diag.features import CONFIG_COLUMNS, LOOKAHEAD_COLUMNS

    def table(cols: dict) -> list[str]:
        return ["| column | meaning |", "|---|---|", *(f"| `{k}` | {cell(v)} |" for k, v in cols.items())]
    return "\n".join(["`Run.features()`, one row per teacher config:", "", *table(CONFIG_COLUMNS), "",
                      "`Run.lookahead_frame()`, one row per (config, loss method) looked ahead:", "",
                      *table(LOOKAHEAD_COLUMNS)])


def prediction_columns_block() -> str:
    from opsd_diag.prediction import COLUMNS

    return "\n".join(["| column | meaning |", "|---|---|", *(f"| `{k}` | {cell(v)} |" for k, v in COLUMNS.items())])


def figures_block() -> str:
    from opsd_diag.report.figures import FIGURE_HELP

    rows = ["| figure | what it shows |", "|---|---|"]
    rows += [f"| `{name}` | {cell(text)} |" for name, text in FIGURE_HELP.items()]
    return "\n".join(rows)


# What each method trains on beyond the per-token loss (the loss itself is read from opsd_diag.core.losses).
METHOD_HELP = {
    "opd": "an external teacher model (`teachers[].model` a model); `clip` clips the advantage",
    "jsd": "an external teacher model, detached; β = `training.beta`",
    "opsd": "the student itself shown a privileged context (a `teachers` entry with `model: self` and a "
            "context other than `none`); `loss` picks the per-token loss, `teacher_weights` the teacher's "
            "weights: `frozen` (the initial student; with LoRA the adapter switched off), `ema` (moved "
            "toward the student after each step by `ema_decay`) or `live` (the current student, no gradient)",
    "opd2": "an external teacher model and the `base` model (required); centred per `centering`",
    "exopd": "an external teacher model; λ = `exopd_lambda`, reference R = the initial student or the "
             "`base` (`exopd_reference`)",
    "uld": "an external teacher model, detached, of any tokenizer: the distance between sorted probabilities "
           "(Universal Logit Distillation); with another tokenizer, at each common span's first position",
    "sft": "no teacher and no sampling: the reference response rendered from `sft_target` (the baseline to beat)",
}


def methods_block() -> str:
    from opsd_diag.config.spec import METHODS
    from opsd_diag.core import losses

    def loss_text(method: str) -> str:
        if method in losses.ADVANTAGE:
            return f"REINFORCE, advantage `{losses.ADVANTAGE[method]}` (stop-gradient)"
        fn = losses.LOSSES.get(method)
        if fn is losses.jsd_loss:
            return "full-vocabulary `jsd` (generalised JSD)"
        if fn is losses.sft_loss:
            return "token NLL at temperature 1"
        if fn is losses.uld_loss:
            return "`uld`: L1 distance between the sorted probabilities (ULD)"
        return "`loss: jsd` as `jsd`, `loss: opd` as `opd`"

    missing = [m for m in METHODS if m not in METHOD_HELP]
    if missing:
        raise SystemExit(f"docs/generate.py: add a METHOD_HELP entry for {missing}")
    rows = ["| method | per-token loss | teacher and settings |", "|---|---|---|"]
    rows += [f"| `{m}` | {loss_text(m)} | {cell(METHOD_HELP[m])} |" for m in METHODS]
    return "\n".join(rows)


def from_diagnosis_block() -> str:
    """Which training section ``opsd-train --from-diagnosis`` builds for each diagnosed signal."""
    from trainer import from_diagnosis as fd

    def keys(entry: dict | None) -> str:
        if entry is None:
            return "not available (needs a teacher model)"
        return ", ".join(f"`{v}`" if k == "method" else f"{k} `{v}`" for k, v in entry.items())

    rows = ["| signal | external teacher model | self-teacher (the student shown a context) |", "|---|---|---|"]
    rows += [f"| `{sig}` | {keys(fd.EXTERNAL.get(sig))} | {keys(fd.SELF.get(sig))} |"
             for sig in dict.fromkeys([*fd.EXTERNAL, *fd.SELF])]
    return "\n".join(rows)


def levers_block() -> str:
    from opsd_diag.levers import COLUMNS

    return "\n".join(["| column | meaning |", "|---|---|", *(f"| `{k}` | {cell(v)} |" for k, v in COLUMNS.items())])


def schedule_block() -> str:
    from opsd_diag.schedule_points import COLUMNS, COURSE_COLUMNS

    return "\n".join(["| column | meaning |", "|---|---|", *(f"| `{k}` | {cell(v)} |" for k, v in COLUMNS.items()),
                      "", "`Run.schedule_courses()`, one row per (source, loss method, course):", "",
                      "| column | meaning |", "|---|---|", *(f"| `{k}` | {cell(v)} |" for k, v in COURSE_COLUMNS.items())])


# metrics.jsonl keys of a `train` record: what each means.
METRIC_HELP = {
    "kind": "`train` (this record) or `eval`",
    "step": "optimizer steps done (1 for the first step's record)",
    "method": "`training.method`",
    "loss": "the step's loss: sum of the per-token loss over the step's kept tokens (every generated token "
            "unless `token_mask` says otherwise), divided by their count",
    "lr": "learning rate used by the step",
    "grad_norm": "gradient norm before clipping",
    "tokens": "generated tokens of the step, all processes",
    "completion_length": "mean completion length (tokens)",
    "finished_ratio": "share of completions that stopped before `max_completion_length`",
    "sampling_s": "seconds spent sampling on the main process",
    "sampling_temperature": "τ_sample of the step",
    "scoring_temperature": "τ_score of the step's loss",
    "tokens_per_s": "generated tokens trained per second (this step)",
    "step_time_s": "wall-clock seconds of the step",
    "elapsed_s": "training seconds so far, resumed segments included",
    "eta_s": "estimated seconds to `max_steps`",
    "r_opd": "mean r_opd = lp_t − lp_s (all methods but sft)",
    "kl_k1": "mean −r_opd: the k1 estimate of KL(student ‖ teacher) from the student's samples (all but sft)",
    "kl_k3": "mean e^r_opd − 1 − r_opd: the k3 estimate, ≥ 0 (all but sft)",
    "entropy_student": "mean student entropy h_s (every method)",
    "entropy_teacher": "mean teacher entropy h_t (all but sft)",
    "gate_fraction": "share of tokens the OPD² gate keeps (opd2)",
    "clipped_ratio": "share of advantages clipped by `clip` (all but sft; 0 without `clip`)",
    "nll": "mean token NLL of the reference response (sft)",
    "uld": "mean ULD distance Σ_i |p_(i) − q_(i)| (uld; per common span with a teacher of another tokenizer)",
    "left_out_ratio": "share of completions of which no token round-trips through the teacher's tokenizer, which "
                      "train nothing (a teacher with another tokenizer; the others train up to their cut, "
                      "docs/signals.md; r_opd, kl_k1, kl_k3 are then means over spans)",
    "kept_tokens": "tokens the loss kept (`token_mask`; all generated tokens by default), all processes",
    "kept_ratio": "kept_tokens / tokens",
    "revealed_fraction": "share of each solution the teacher's context revealed (`context_schedule`; 1 by default)",
    "running_accuracy": "the adaptive schedule's running accuracy after the step (null for the other schedules)",
    "rollout_accuracy": "share of the step's rollouts verified correct (only when a lever reads the outcomes: "
                        "`token_mask.rollouts` or the adaptive schedule)",
}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def train_keys() -> list[str]:
    """Keys of a ``train`` record of metrics.jsonl, in order, read from trainer/loop.py and STAT_NAMES."""
    from opsd_diag.engine.step_sums import STAT_NAMES

    tree = ast.parse((ROOT / "trainer" / "loop.py").read_text())
    step = next(n.value for n in ast.walk(_function(tree, "train_step"))
                if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict))
    record = next(n.value for n in ast.walk(_function(tree, "_train"))
                  if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
                  and any(isinstance(k, ast.Constant) and k.value == "kind" for k in n.value.keys))

    def keys(d: ast.Dict) -> list[str]:
        out = []
        for k, v in zip(d.keys, d.values):
            if isinstance(k, ast.Constant):
                out.append(k.value)
            elif isinstance(v, ast.Name):  # **rec: the dict train_step returns
                out += keys(step)
            elif isinstance(v, ast.DictComp):  # **{STAT_NAMES[k]: ...}: the method's statistics
                out += list(STAT_NAMES.values())
        return out

    return list(dict.fromkeys(keys(record)))


def metrics_block() -> str:
    keys = train_keys()
    missing = [k for k in keys if k not in METRIC_HELP]
    if missing:
        raise SystemExit(f"docs/generate.py: add a METRIC_HELP entry for the metrics.jsonl keys {missing}")
    rows = ["| key | meaning |", "|---|---|"]
    rows += [f"| `{k}` | {cell(METRIC_HELP[k])} |" for k in keys]
    return "\n".join(rows)


PACKAGES = ("opsd_diag", "trainer", "app")


def _modules(pkg: str) -> list[Path]:
    """The package's modules under version control (a file not yet added is not documented yet);
    every ``.py`` file on disk when git is not available."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", pkg], cwd=ROOT, capture_output=True,
                                check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        return sorted((ROOT / pkg).rglob("*.py"))
    return sorted(p for name in listed if name.endswith(".py") and (p := ROOT / name).is_file())


def modules_block() -> str:
    """Every module with the first paragraph of its docstring, folder by folder."""
    out = []
    for pkg in PACKAGES:
        folders: dict[Path, list[Path]] = {}
        for path in _modules(pkg):
            folders.setdefault(path.parent, []).append(path)
        for folder, paths in folders.items():
            rel = folder.relative_to(ROOT).as_posix()
            out.append(f"- `{rel}/`")
            for path in paths:
                doc = first_line(ast.get_docstring(ast.parse(path.read_text())))
                if doc:
                    out.append(f"  - [`{path.name}`](../{rel}/{path.name}): {doc}")
    return "\n".join(out)


