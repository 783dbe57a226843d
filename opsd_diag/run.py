"""A finished diagnosis as one object: ``Run.load(path)`` -> typed summary, tables, verdicts, figures,
heatmaps, the HTML report and exports. The CLI and every app page read runs through it.

    from opsd_diag.run import Run
    run = Run.load("runs/quickstart")
    run.verdicts()                      # ranked helps / unclear / hurts per (config, signal)
    run.figures("a_d2")                 # Plotly figures by name
    run.heatmap(3, ["teacher"], "r_opd")  # one rollout's tokens as an HTML heatmap
    run.export("out/", table_format="csv")

Tables are read lazily (a million-row token table is only loaded when asked for) and every file of
the run directory goes through ``io.store``, which turns a missing or corrupt file into one error.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from pydantic import ValidationError

from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.io.config import DiagnosisConfig, from_dict
from opsd_diag.report import export, figures, heatmap, html
from opsd_diag.summary import Summary

TABLES = ("rollouts", "tokens", "topk", "teacher_rollouts", "nodes")


class Run:
    """A finished run directory (see ``Run.load``)."""

    def __init__(self, path: Path, manifest: dict, summary: Summary):
        self.path, self.manifest, self.summary = Path(path), manifest, summary
        self._tables: dict[str, pd.DataFrame] = {}

    @classmethod
    def load(cls, path: str | Path) -> Run:
        """The run in ``path``; an unfinished, missing or corrupt run is one OpsdError naming the fix."""
        path = Path(path)
        manifest = store.read_manifest(path)
        if manifest.get("status") != "finished":
            raise OpsdError(f"run {path} is not finished (status: {manifest.get('status')}): "
                            f"resume it with 'opsd-diag run {path / 'config.yaml'} --out {path}'")
        try:
            summary = Summary.model_validate(store.read_json(path / "summary.json"))
        except ValidationError as e:
            raise OpsdError(f"{path / 'summary.json'} does not match the summary schema ({e.errors()[0]['msg']} at "
                            f"{'.'.join(map(str, e.errors()[0]['loc']))}): rerun the diagnosis into a new --out") \
                from None
        return cls(path, manifest, summary)

    # -------------------------------------------------------------------------------- data
    @cached_property
    def config(self) -> DiagnosisConfig:
        return from_dict(self.manifest.get("config") or {}, f"{self.path / 'manifest.json'} config")

    @property
    def configs(self) -> list[str]:
        return self.summary.config_names

    def table(self, name: str) -> pd.DataFrame:
        if name not in TABLES:
            raise OpsdError(f"unknown table '{name}': choose one of {', '.join(TABLES)}")
        return self._tables.setdefault(name, store.read_table(self.path, name))

    rollouts = property(lambda self: self.table("rollouts"))
    tokens = property(lambda self: self.table("tokens"))
    topk = property(lambda self: self.table("topk"))
    teacher_rollouts = property(lambda self: self.table("teacher_rollouts"))
    nodes = property(lambda self: self.table("nodes"))

    def facts(self) -> dict:
        """The run in one line: status, problems, samples, temperatures, centring, seed, time, student."""
        m = self.manifest
        facts = {k: m.get(k) for k in ("status", "n_problems", "sampling_temperature", "scoring_temperature",
                                       "centering", "seed", "seconds")}
        facts["samples"] = (m.get("config") or {}).get("sampling", {}).get("num_samples")
        facts["student"] = (m.get("config") or {}).get("student", {}).get("model")
        return facts

    def verdicts(self) -> pd.DataFrame | None:
        """Ranked verdicts (rank, config, signal, verdict, score, reason), or None without a predictor."""
        return self.summary.verdict_frame()

    def rollout(self, rollout_id: int, config: str | None = None) -> tuple[pd.Series, pd.DataFrame, str]:
        """(the rollout's row, its tokens under ``config`` in position order, the config name)."""
        rollouts, tokens = self.rollouts, self.tokens
        match = rollouts[rollouts["rollout_id"] == rollout_id]
        if match.empty:
            raise OpsdError(f"no rollout {rollout_id} in this run: rollout ids go from "
                            f"{rollouts['rollout_id'].min()} to {rollouts['rollout_id'].max()}")
        config = config or (self.configs[0] if self.configs else None)
        if config not in self.configs:
            raise OpsdError(f"unknown config '{config}': this run has {', '.join(self.configs)}")
        t = tokens[(tokens["rollout_id"] == rollout_id) & (tokens["config"] == config)].sort_values("pos")
        return match.iloc[0], t, config

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

    def heatmap(self, rollout: int, configs: list[str] | None = None, signal: str = "r_opd", tokenizer=None) -> str:
        """One rollout's tokens coloured by ``signal``, one heatmap per config (stacked), as HTML."""
        parts = []
        for config in configs or self.configs[:1]:
            row, t, config = self.rollout(rollout, config)
            topk = self.topk
            if not topk.empty:
                topk = topk[topk["rollout_id"] == rollout]
            title = (f"rollout {rollout} · problem {row['problem_id']} · sample {row['sample_idx']} · config "
                     f"{config} · correct={row['correct']} · finished={row['finished']} · {len(t)} tokens")
            parts.append(heatmap.render_heatmap(t, signal, topk, config, tokenizer, title))
        return "".join(parts)

    def report_html(self, signal: str = "r_opd", n_heatmaps: int = 3, tokenizer=None, title: str = "") -> str:
        """One self-contained HTML page: facts, summary, verdicts, every figure, a few heatmaps."""
        first = self.configs[:1]
        maps = [self.heatmap(rid, first, signal, tokenizer) for rid in self.pick_rollouts(n_heatmaps)] if first else []
        return html.report_html(self.facts(), self.summary, self.figures(signal), maps,
                                heatmap_title=f"{first[0]}, coloured by {signal}" if first else "", title=title)

    def tokenizer(self):
        """The student's tokenizer for decoding top-k ids, or None (ids are shown) when it is not here.

        Never runs code from the run folder: remote code stays off, whatever the manifest says.
        """
        from opsd_diag.io.models import load_tokenizer

        spec = (self.manifest.get("config") or {}).get("student") or {}
        try:
            return load_tokenizer(str(spec.get("model") or ""), spec.get("revision"), False, False)
        except (OpsdError, TypeError):
            return None

    # ------------------------------------------------------------------------------ export
    def tables(self) -> dict[str, pd.DataFrame]:
        """Every exportable table: the summary's in long form plus the stored ones."""
        s = self.summary
        out = {"summary": s.headline_frame(), "ci": s.ci_frame(), "accuracy": s.accuracy_frame(),
               "entropy_bins": s.entropy_frame(), "positions": s.position_frame()}
        if s.ranking:
            out["verdicts"] = s.verdict_frame()
        out.update({name: self.table(name) for name in TABLES})
        return out

    def export(self, out_dir: str | Path, *, table_format: str = "csv", figure_format: str = "html",
               signal: str = "r_opd") -> list[Path]:
        """Every table, every figure and the HTML report into ``out_dir``; returns the files written."""
        if table_format not in export.TABLE_FORMATS:
            raise OpsdError(f"unknown table format '{table_format}': use one of {', '.join(export.TABLE_FORMATS)}")
        if figure_format not in ("html", *export.IMAGE_FORMATS):
            raise OpsdError(f"unknown figure format '{figure_format}': use html, png or svg")
        out_dir = Path(out_dir)
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OpsdError(f"cannot write to {out_dir} ({e.strerror}): choose a writable directory") from None
        files = {f"{name}.{table_format}": export.table_bytes(frame, table_format)
                 for name, frame in self.tables().items()}
        for name, fig in self.figures(signal).items():
            files[f"{name}.{figure_format}"] = (export.figure_html(fig).encode() if figure_format == "html"
                                                else export.figure_image(fig, figure_format))
        files["report.html"] = self.report_html(signal, tokenizer=self.tokenizer()).encode()
        for name, data in files.items():
            store.atomic_write_bytes(out_dir / name, data)
        return [out_dir / name for name in files]
