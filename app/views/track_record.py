"""Track record: every training run started from a diagnosis, its prediction next to what it did, and
every run under the runs folder with the status its directory records (it survives any restart)."""

from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from app import common
from opsd_diag import jobs
from opsd_diag.errors import OpsdError
from opsd_diag.scoreboard import number, scoreboard

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
    c[1].metric("Spearman (score vs gain)", "n/a" if board.spearman != board.spearman else f"{board.spearman:+.2f}",
                help="needs 3 or more scored runs")
    c[2].metric("Verdict accuracy", "n/a" if board.verdict_accuracy != board.verdict_accuracy
                else f"{board.verdict_accuracy:.0%}", help="helps/hurts verdicts whose sign matches the realised gain")
    st.dataframe(board.frame.assign(run=board.frame["run"].map(lambda p: Path(p).name)), hide_index=True,
                 key="tr_board", column_config={c: st.column_config.NumberColumn(format="%.3f")
                                                for c in ("score", "pass@1_start", "pass@1_end", "gain",
                                                          "kl_to_initial")})
    done = board.frame.dropna(subset=["score", "gain"])
    if not done.empty:
        fig = px.scatter(done, x="score", y="gain", color="verdict", hover_data=["config", "signal", "run"],
                         color_discrete_map={"helps": "#2d1ebe", "hurts": "#be1e2d", "unclear": "#888"},
                         title="Predicted score vs realised pass@1 gain")
        fig.add_hline(y=0, line_color="#444", line_width=1)
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
