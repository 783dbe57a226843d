"""Track record: every training run started from a diagnosis, its prediction next to what it did, and
every run under the runs folder with the status its directory records (it survives any restart)."""

from pathlib import Path

import pandas as pd
import streamlit as st

from app import common
from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.scoreboard import MIN_JUDGED, MIN_SPEARMAN, number, scoreboard

st.title("Track record")
root = Path(st.session_state.get("runs_root", "runs"))
try:
    board = scoreboard(root)
except OpsdError as e:
    st.info(common.plain(str(e)))
    st.stop()

if board.frame.empty:
    st.info("No training run started from a diagnosis yet: use 'Train this' on a verdict (Overview).")
else:
    c = st.columns(3)
    c[0].metric("Runs scored", board.n_scored, help="finished runs with a prediction and a realised pass@1 gain")
    rho_ok = board.n_scored >= MIN_SPEARMAN and board.spearman == board.spearman
    c[1].metric("Spearman (score vs gain)", f"{board.spearman:+.2f}" if rho_ok else "n/a",
                help=f"over {board.n_scored} scored runs; shown from {MIN_SPEARMAN} runs on (fewer points allow "
                     "only a few values)")
    acc_ok = board.n_judged >= MIN_JUDGED
    c[2].metric("Verdict accuracy", f"{board.verdict_accuracy:.0%}" if acc_ok else "n/a",
                help=f"{board.n_right} right of {board.n_judged} judged: a helps/hurts verdict is judged only where its "
                     f"run's gain interval (95%, bootstrap over held-out problems) excludes zero; shown from "
                     f"{MIN_JUDGED} judged runs on")
    st.caption(f"Judged verdicts: {board.n_right} right of {board.n_judged} (helps/hurts runs whose realised gain "
               "interval excludes zero); an interval that includes zero is 'no clear change' and counts neither way.")
    shown = board.frame.assign(run=board.frame["run"].map(lambda p: Path(p).name),
                               signal=board.frame["signal"].map(lambda s: common.signal_name(s) if s else s))
    st.dataframe(shown, hide_index=True,
                 key="tr_board", column_config={c: st.column_config.NumberColumn(format="%.3f")
                                                for c in ("score", "pass@1_start", "pass@1_end", "gain", "gain_lo",
                                                          "gain_hi", "kl_to_initial")})
    if not board.frame.dropna(subset=["score", "gain"]).empty:
        from opsd_diag.report.tables import track_record_figure

        fig = track_record_figure(board.frame.assign(run=board.frame["run"].map(lambda p: Path(p).name)))
        st.plotly_chart(fig, key="tr_scatter")

st.subheader(f"Every run under {root}/")
rows, skipped = [], []
for p in jobs.find_runs(root, skipped=skipped):
    s = jobs.status(p)
    rows.append({"run": p.name, "kind": s.get("kind") or ("diagnosis" if (p / "manifest.json").is_file()
                                                           else "training"),
                 "status": s["status"], "stage": s.get("stage"), "done": s.get("done"), "total": s.get("total"),
                 "updated": pd.to_datetime(number(s.get("updated")), unit="s")})
st.dataframe(pd.DataFrame(rows), hide_index=True, key="tr_runs")
if skipped:
    st.caption(f"{len(skipped)} unreadable folder(s) skipped: " + ", ".join(common.md(p.name[:60]) for p, _ in skipped))
st.caption("Read from each run directory's status.json: a reload or a restart of the app changes nothing here.")
