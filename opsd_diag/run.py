"""A finished diagnosis as one object: ``Run.load(path)`` -> typed summary, tables, verdicts, figures,
heatmaps, the HTML report and exports. The CLI and every app page read runs through it.

    from opsd_diag.run import Run
    run = Run.load("runs/quickstart")
    run.predictions().frame()           # predictor v2: predicted gain [lo, hi] per (config, method), ranked
    run.verdicts()                      # the v1 verdicts per (config, signal), with v2's columns joined
    run.figures("a_d2")                 # Plotly figures by name
    run.heatmap(3, ["teacher"], "r_opd")  # one rollout's tokens as an HTML heatmap
    run.export_heatmap(3, ["teacher", "self_full"], "a_d2", "svg")  # the same, stacked, as a file
    run.export("out/", table_format="csv")

Tables are read lazily (a million-row token table is only loaded when asked for) and every file of
the run directory goes through ``io.store``, which turns a missing or corrupt file into one error.
"""

from __future__ import annotations

import threading
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from pydantic import ValidationError

from opsd_diag.core.aggregate import entropy_bins
from opsd_diag.errors import OpsdError
from opsd_diag.io import rebase, safe, store, trust
from opsd_diag import checks, features, levers, prediction, schedule_points
from opsd_diag.config.spec import DiagnosisConfig, from_dict
from opsd_diag.report import evidence, export, figures, heatmap, html, tables, token_figure
from opsd_diag.schema import SIGNAL_COLUMNS
from opsd_diag.summary import Summary

TABLES = ("rollouts", "tokens", "topk", "teacher_rollouts", "nodes", "acting_nodes")
RECENT = 32  # rollout rows and tooltips kept per run (``Run._recent``): a 4,000-token rollout's tooltips are ~6 MB
SUMMARY_TABLES = ("summary", "ci", "accuracy", "entropy_bins", "positions", "verdicts")


class Run(levers.LeverView, schedule_points.ScheduleView):
    """A finished run directory (see ``Run.load``)."""

    def __init__(self, path: Path, manifest: dict, summary: Summary):
        self.path, self.manifest, self.summary = Path(path), manifest, summary
        self._tables: dict[str, pd.DataFrame] = {}
        self._memo: dict[tuple, object] = {}  # derived tables (indices, scales, token types), built once
        self._recents: dict[tuple, tuple] = {}  # the last RECENT rollouts' token rows and tooltips (``_recent``)
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path) -> Run:
        """The run in ``path``; an unfinished, missing or corrupt run is one OpsdError naming the fix."""
        path = Path(path)
        manifest = store.read_manifest(path)
        if manifest.get("status") != "finished":
            raise OpsdError(f"run {path} is not finished (status: {manifest.get('status')}): "
                            f"resume it with 'opsd-diag run {path / 'config.yaml'} --out {path}'")
        raw = store.read_json(path / "summary.json")
        try:
            summary = Summary.model_validate(raw)
        except ValidationError as e:
            raise OpsdError(f"{path / 'summary.json'} does not match the summary schema ({e.errors()[0]['msg']} at "
                            f"{'.'.join(map(str, e.errors()[0]['loc']))}): rerun the diagnosis into a new --out") \
                from None
        store.check_summary(path, raw, manifest)  # this run's own summary: its run id
        return cls(path, manifest, summary)

    # -------------------------------------------------------------------------------- data
    @cached_property
    def config(self) -> DiagnosisConfig:
        """The run's config with remote code off, whatever the manifest says (``io.trust``)."""
        return from_dict(trust.without_code(self._stored_config())[0], f"{self.path / 'manifest.json'} config")

    def config_for_models(self, trust_remote_code: bool = False) -> tuple[DiagnosisConfig, str | None]:
        """(the config to load the run's models with, remote code only as the user's own flag says; the one-line
        note when the manifest asked for remote code, else None)."""
        stored = self._stored_config()
        _, asked = trust.without_code(stored)
        cfg = from_dict(trust.with_code(stored, trust_remote_code), f"{self.path / 'manifest.json'} config")
        return cfg, trust.note(self.path / "manifest.json", asked, trust_remote_code)

    def _stored_config(self) -> dict:
        """The manifest's config, refused in one line when it is not an object (a damaged manifest), its relative
        paths read where the diagnosis read them (``io.rebase``)."""
        stored = self.manifest.get("config")
        if not isinstance(stored, dict):
            what = "missing" if stored is None else f"{type(stored).__name__}, not an object"
            raise OpsdError(f"{self.path / 'manifest.json'}: its config is {what} (damaged or edited by hand): "
                            "rerun the diagnosis into a new --out")
        return rebase.rebased(stored, self.manifest.get("cwd"))

    @property
    def configs(self) -> list[str]:
        return self.summary.config_names

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise OpsdError(f"unknown table '{name}': choose one of {', '.join(TABLES)}")
        if name not in self._tables:  # read once (setdefault would read the file on every access)
            self._tables[name] = store.read_table(self.path, name, optional=name in ("nodes", "acting_nodes"))
        return self._tables[name]

    rollouts, tokens, topk, teacher_rollouts, nodes = (  # the stored tables by name, read on first access
        property(lambda self, n=n: self.table(n)) for n in ("rollouts", "tokens", "topk", "teacher_rollouts", "nodes"))
    acting_nodes = property(lambda self: self.table("acting_nodes"))  # nodes where training acts (ideal.acting_budget)

    def facts(self) -> dict:
        """The run in one line: status, problems, samples, temperatures, centring, seed, time, student. A
        value of the wrong type in a damaged or hand-edited manifest is None (shown as missing), never an error."""
        m, cfg = self.manifest, _section(self.manifest, "config")
        facts = {k: _fact(m.get(k)) for k in ("status", "n_problems", "sampling_temperature", "scoring_temperature",
                                              "centering", "seed", "seconds")}
        facts["samples"] = _fact(_section(cfg, "sampling").get("num_samples"))
        facts["student"] = _fact(_section(cfg, "student").get("model"))
        return facts

    def predictions(self, calibration: str | Path | None = None) -> prediction.Predictions | None:
        """Predictor v2 (``opsd_diag.prediction``) with what the failure checks say per config: the models of the file
        ``calibration``, else the config's ``ideal.calibration``, else the shipped ones; None without a model file."""
        cfg = _section(self.manifest, "config")  # read leniently: a hand-edited manifest still predicts
        named = _section(cfg, "ideal").get("calibration") if calibration is None else None
        calibration = named if isinstance(named, str) else calibration
        key = ("predictions", None if calibration is None else str(calibration))
        if key not in self._memo:
            teachers = cfg.get("teachers") if isinstance(cfg.get("teachers"), list) else []
            own = {t.get("name") for t in teachers if isinstance(t, dict) and t.get("model", "self") == "self"}
            base, cautions = isinstance(cfg.get("base"), dict), checks.cautions(self.failure_checks())
            try:  # only the calibration's own errors are put down to the config naming it
                self._memo[key] = prediction.predict(self.summary, own, base, calibration, cautions)
            except OpsdError as e:
                if not isinstance(named, str):
                    raise
                raise OpsdError(f"the config of {self.path} names ideal.calibration: {e}") from None
        return self._memo[key]

    def features(self) -> pd.DataFrame:
        """One row per teacher config: G (per level, normalised), the cheap predictors, A_T where training acts."""
        return features.config_frame(self.summary)

    def lookahead_frame(self) -> pd.DataFrame | None:
        """One row per (config, method) looked ahead: its columns and the fresh-sample pass@k change."""
        return features.lookahead_frame(self.summary)

    def verdicts(self, calibration: str | Path | None = None) -> pd.DataFrame | None:
        """Ranked v1 verdicts (rank, config, signal, verdict, score, reason) with predictor v2's columns joined
        where a v2 method trains the signal (``prediction.JOINED``), or None without a v1 predictor."""
        frame = self.summary.verdict_frame()
        pred = self.predictions(calibration) if frame is not None else None
        return frame if pred is None else prediction.join(frame, pred)

    def _rows(self, name: str, rollout_id: int) -> pd.DataFrame:
        """The rows of table ``name`` for one rollout, through an index built once (tables are large)."""
        key = ("index", name)
        if key not in self._memo:
            t = self.table(name)
            self._memo[key] = t.groupby("rollout_id", sort=False).indices if not t.empty else {}
        idx = self._memo[key].get(rollout_id)
        t = self.table(name)
        return t.iloc[idx] if idx is not None else t.iloc[:0]

    def rollout(self, rollout_id: int, config: str | None = None) -> tuple[pd.Series, pd.DataFrame, str]:
        """(the rollout's row, its tokens under ``config`` in position order, the config name)."""
        rollouts = self.rollouts
        match = rollouts[rollouts["rollout_id"] == rollout_id]
        if match.empty:
            raise OpsdError(f"no rollout {rollout_id} in this run: rollout ids go from "
                            f"{rollouts['rollout_id'].min()} to {rollouts['rollout_id'].max()}")
        config = config or (self.configs[0] if self.configs else None)
        if config not in self.configs:
            raise OpsdError(f"unknown config '{config}': this run has {', '.join(self.configs)}")
        def tokens():
            t = self._rows("tokens", rollout_id)
            return t[t["config"] == config].sort_values("pos")
        return match.iloc[0], self._recent(("tokens", rollout_id, config), tokens).copy(deep=False), config

    def top_config(self) -> str | None:
        """The config of the best-ranked verdict, else the first config (the pages' default)."""
        ranking = self.summary.ranking
        return ranking[0].config if ranking else (self.configs[0] if self.configs else None)

    def signal_scale(self, signal: str, configs: list[str] | None = None, rollout: int | None = None) -> float:
        """The heatmap colour scale: the 95th percentile of |signal| over one rollout (``rollout``) or
        over the whole run, of the given configs (all by default)."""
        configs = list(configs or self.configs)
        key = ("scale", signal, tuple(configs), rollout)
        if key not in self._memo:
            t = self.tokens if rollout is None else self._rows("tokens", rollout)
            self._memo[key] = heatmap.heatmap_scale(t.loc[t["config"].isin(configs), signal])
        return self._memo[key]

    def entropy_bin(self, tokens: pd.DataFrame) -> pd.Series:
        """The student-entropy bin of each token (the bins of the run's summary)."""
        edges = self.summary.settings.get("entropy_edges")
        return entropy_bins(tokens["h_s"].astype(float), edges=edges).astype(str)

    def pick_rollouts(self, n: int = 3) -> list[int]:
        """A few rollouts worth a look: incorrect ones first, then correct, then the rest, in id order."""
        r = self.rollouts
        if r.empty:
            return []
        key = np.where(r["correct"].isna(), 2, np.where(r["correct"].fillna(False).astype(bool), 1, 0))
        order = r.assign(_k=key).sort_values(["_k", "rollout_id"])
        firsts = order.groupby("_k").head(1)["rollout_id"].tolist()
        rest = [i for i in order["rollout_id"] if i not in firsts]
        return [int(i) for i in (firsts + rest)[:n]]

    # ---------------------------------------------------------------------------- displays
    def figure(self, name: str, signal: str = "r_opd", config: str | None = None) -> go.Figure:
        needs_tokens = name in ("alignment", "correctness")
        return figures.figure(name, self.summary, self.tokens if needs_tokens else pd.DataFrame(),
                              self.rollouts if needs_tokens else pd.DataFrame(), signal, config)

    def figures(self, signal: str = "r_opd", config: str | None = None) -> dict[str, go.Figure]:
        """Every figure of ``report.figures.FIGURE_HELP``, in that order."""
        return {name: self.figure(name, signal, config) for name in figures.FIGURE_HELP}

    def heatmap(self, rollout: int, configs: list[str] | None = None, signal: str = "r_opd", tokenizer=None, *,
                scale: str = "rollout", entropy_bin: str | None = None, hot: set[int] | None = None) -> str:
        """One rollout's tokens coloured by ``signal``, one heatmap per config (stacked, one colour scale),
        as HTML. ``scale``: "rollout" or "run" (the 95th percentile of |signal| over either);
        ``entropy_bin`` fades the tokens outside that student-entropy bin; ``hot`` outlines positions."""
        if signal not in SIGNAL_COLUMNS:
            raise OpsdError(f"unknown signal '{signal}': choose one of {', '.join(SIGNAL_COLUMNS)}")
        if scale not in ("rollout", "run"):
            raise OpsdError(f"unknown colour scale '{scale}': use rollout or run")
        configs = list(configs or self.configs[:1])
        value = self.signal_scale(signal, configs, None if scale == "run" else rollout)
        topk = self._rows("topk", rollout) if not self.topk.empty else None
        parts = []
        for config in configs:
            row, t, config = self.rollout(rollout, config)
            dim = (self.entropy_bin(t) != entropy_bin).to_numpy() if entropy_bin else None
            title = (f"rollout {rollout} · problem {row['problem_id']} · sample {row['sample_idx']} · config "
                     f"{config} · correct={row['correct']} · finished={row['finished']} · {len(t)} tokens")
            parts.append(heatmap.render_heatmap(t, signal, topk, config, tokenizer, title, scale=value,
                                                scope="this rollout" if scale == "rollout" else "the whole run",
                                                dim=dim, hot=hot, tips=self._tooltips(rollout, config, t, topk,
                                                                                      tokenizer)))
        return "".join(parts)

    def _recent(self, key: tuple, make, owner=None):
        """``make()``, kept for the last RECENT keys (a rollout's token rows, its tooltips): the Tokens page
        re-colours the same rollout for every signal, scale or filter. ``owner`` (a tokenizer) must be the
        very object the value was made with (an id alone could be reused)."""
        with self._lock:  # the app shares one Run between its sessions (threads)
            kept = self._recents.pop(key, None)
        if kept is None or kept[0] is not owner:
            kept = (owner, make())
        with self._lock:
            self._recents[key] = kept  # last used goes last
            while len(self._recents) > RECENT:
                self._recents.pop(next(iter(self._recents)))
        return kept[1]

    def _tooltips(self, rollout: int, config: str, t: pd.DataFrame, topk, tokenizer) -> list[str]:
        """``heatmap.tooltips`` of one rollout under one config and tokenizer (``_recent``)."""
        return self._recent(("tips", rollout, config, id(tokenizer)),
                            lambda: heatmap.tooltips(t, topk, config, tokenizer), tokenizer)

    def heatmap_figure(self, rollout: int, configs: list[str] | None = None, signal: str = "r_opd", *,
                       scale: str = "rollout") -> go.Figure:
        """The same heatmap as a Plotly figure (tokens in a grid, one panel per config): PNG and SVG."""
        configs = list(configs or self.configs[:1])
        value = self.signal_scale(signal, configs, None if scale == "run" else rollout)
        panels = {c: self.rollout(rollout, c)[1] for c in configs}
        return token_figure.token_figure(panels, signal, value, f"rollout {rollout} coloured by {signal}")

    def export_heatmap(self, rollout: int, configs: list[str] | None = None, signal: str = "r_opd",
                       fmt: str = "html", tokenizer=None, *, scale: str = "rollout") -> bytes:
        """A heatmap as a file: self-contained HTML (no script, no network request), PNG or SVG."""
        if fmt == "html":
            body = self.heatmap(rollout, configs, signal, tokenizer, scale=scale)
            return heatmap.document([body], f"{self.path.name}: rollout {rollout}, {signal}").encode()
        if fmt not in export.IMAGE_FORMATS:
            raise OpsdError(f"unknown heatmap format '{fmt}': use html, png or svg")
        fig = self.heatmap_figure(rollout, configs, signal, scale=scale)
        return export.figure_image(fig, fmt, width=fig.layout.width, height=fig.layout.height, scale=1.5)

    def token_types(self, signal: str, config: str, min_count: int = 5) -> pd.DataFrame:
        """Per token string: count, mean and total ``signal`` under ``config`` (``report.tables``)."""
        key = ("types", signal, config, min_count)
        if key not in self._memo:
            self._memo[key] = tables.token_types(self.tokens, signal, config, min_count)
        return self._memo[key]

    def disagreement(self, signal: str, configs: list[str], n: int = 20, rollout: int | None = None) -> pd.DataFrame:
        """The tokens where ``configs`` disagree most on ``signal`` (in one rollout, or the whole run)."""
        key = ("disagree", signal, tuple(configs), n, rollout)
        if key not in self._memo:
            t = self.tokens if rollout is None else self._rows("tokens", rollout)
            self._memo[key] = tables.disagreement(t, signal, list(configs), n)
        return self._memo[key]

    def evidence_figures(self, signal: str = "r_opd", divergence: str = "kl_rev") -> dict[str, go.Figure]:
        """The predictor's evidence by name (``report.evidence.EVIDENCE_HELP``)."""
        s = self.summary
        return {"advantage": evidence.advantage_figure(s), "direction": evidence.direction_figure(s),
                "split": evidence.split_figure(s, signal),
                "scatter": evidence.scatter_figure(self.nodes, s, signal, divergence)}

    def failure_checks(self, tokenizer=None) -> list:
        """``opsd_diag.checks.for_run``: one ``core.failure_checks.Check`` per line of the report (computed once)."""
        key = ("checks", id(tokenizer))
        return self._memo[key] if key in self._memo else self._memo.setdefault(key, checks.for_run(self, tokenizer))

    def sampler_mismatch(self) -> pd.DataFrame | None:
        """A rollouts file's log-probs against the student's, overall and by position (``checks.mismatch_frame``)."""
        return checks.mismatch_frame(self.summary.sampler_mismatch)

    def candidates(self, tokenizer=None) -> pd.DataFrame:
        """The predictor's nodes, one row per candidate token (``report.evidence.candidates``)."""
        decode = (lambda i: repr(tokenizer.decode([int(i)]))) if tokenizer is not None else None
        return evidence.candidates(self.nodes, decode)

    def report_html(self, signal: str = "r_opd", n_heatmaps: int = 3, tokenizer=None, title: str = "") -> str:
        """One self-contained HTML page: facts, summary, verdicts, every figure, a few heatmaps."""
        first = [self.top_config()] if self.configs else []  # the top-ranked config, as the Tokens page
        maps = [self.heatmap(rid, first, signal, tokenizer) for rid in self.pick_rollouts(n_heatmaps)] if first else []
        return html.report_html(self.facts(), self.summary, self.figures(signal), maps,
                                heatmap_title=f"{first[0]}, coloured by {signal}" if first else "", title=title,
                                predictions=self.predictions(), checks=self.failure_checks(tokenizer))

    def tokenizer(self):
        """The student's tokenizer for decoding top-k ids, or None (ids are shown) when it is not here.

        Never runs code from the run folder: remote code stays off, whatever the manifest says.
        """
        from opsd_diag.io.models import load_tokenizer

        spec = _section(rebase.rebased(_section(self.manifest, "config"), self.manifest.get("cwd")), "student")
        try:
            return load_tokenizer(str(spec.get("model") or ""), spec.get("revision"), False, False)
        except (OpsdError, TypeError):
            return None

    # ------------------------------------------------------------------------------ export
    def table_names(self) -> list[str]:
        """The exportable tables: the summary's in long form, then the stored ones."""
        return [*SUMMARY_TABLES[:5], "features", *(["verdicts"] if self.summary.ranking else []),
                *(n for n, f in self._sections().items() if f() is not None),
                *(["predictions"] if self.predictions() is not None else []), *TABLES]

    def _sections(self) -> dict:  # the tables of optional summary sections: name -> reader (None without it)
        return {"lookahead": self.lookahead_frame, "levers": self.levers, "schedule": self.schedule,
                "schedule_courses": self.schedule_courses}

    def export_table(self, name: str) -> pd.DataFrame:
        """One exportable table by name (only that one is read)."""
        s = self.summary
        derived = {"summary": s.headline_frame, "ci": s.ci_frame, "accuracy": s.accuracy_frame,
                   "entropy_bins": s.entropy_frame, "positions": s.position_frame, "verdicts": s.verdict_frame,
                   "predictions": lambda: self.predictions().frame(), "features": self.features, **self._sections()}
        if name in derived and name in self.table_names():
            return derived[name]()
        return self.table(name)

    def tables(self) -> dict[str, pd.DataFrame]:  # every exportable table: the summary's, then the stored ones
        return {name: self.export_table(name) for name in self.table_names()}

    def export(self, out_dir: str | Path, *, table_format: str = "csv", figure_format: str = "html",
               signal: str = "r_opd") -> list[Path]:
        """Every table, every figure and the HTML report into ``out_dir``; returns the files written."""
        if table_format not in export.TABLE_FORMATS:
            raise OpsdError(f"unknown table format '{table_format}': use one of {', '.join(export.TABLE_FORMATS)}")
        if figure_format not in ("html", *export.IMAGE_FORMATS):
            raise OpsdError(f"unknown figure format '{figure_format}': use html, png or svg")
        out_dir = Path(out_dir)
        if (run := safe.run_of(out_dir)) is not None:
            raise OpsdError(f"{out_dir} is inside the run directory {run}: exports go outside any run (a run's files "
                            "are never replaced); choose another folder")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise safe.resource_error(e, out_dir) or \
                OpsdError(f"cannot write to {out_dir} ({e.strerror}): choose a writable directory") from None
        files = {f"{name}.{table_format}": export.table_bytes(frame, table_format)
                 for name, frame in self.tables().items()}
        for name, fig in self.figures(signal).items():
            files[f"{name}.{figure_format}"] = (export.figure_html(fig).encode() if figure_format == "html"
                                                else export.figure_image(fig, figure_format))
        files["report.html"] = self.report_html(signal, tokenizer=self.tokenizer()).encode()
        for name, data in files.items():
            safe.write_file(out_dir / name, data)
        return [out_dir / name for name in files]


def _section(obj: dict, key: str) -> dict:
    """``obj[key]`` when it is an object, else {} (a manifest may be damaged or hand-edited)."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _fact(value):
    """A manifest value as a fact: a number, a flag or a line of text (at most 200 characters); anything else
    (a list, an object) is None."""
    if isinstance(value, str):
        return value[:200]
    return value if isinstance(value, (int, float, bool)) or value is None else None
