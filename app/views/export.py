"""Export: figures (HTML, PNG, SVG), tables (CSV, Parquet, JSON) and a one-file HTML report."""

import json
from pathlib import Path

import streamlit as st

from app import common
from opsd_diag.report import figures as viz
from opsd_diag.errors import OpsdError

run = common.require_run()
stem = Path(st.session_state["run_dir"]).name
st.title("Export")

st.subheader("Figure")
c1, c2 = st.columns(2)
name = c1.selectbox("Figure", list(viz.FIGURE_HELP), key="exp_fig")
with c2:
    signal = common.signal_select("exp_signal")
fig = viz.figure(run, name, signal)
st.caption(viz.FIGURE_HELP[name])
st.download_button("HTML (interactive, works offline)", lambda: viz.figure_html(fig),
                   file_name=f"{stem}-{name}.html", mime="text/html", key="dl_fig_html")
if viz.image_export_available():
    if st.button("Render PNG and SVG", key="render_img"):
        try:
            st.session_state["img"] = ((name, signal), {f: viz.figure_image(fig, f) for f in viz.IMAGE_FORMATS})
        except OpsdError as e:
            st.error(str(e))
    shown, images = st.session_state.get("img") or (None, {})
    for fmt, data in (images if shown == (name, signal) else {}).items():
        st.download_button(fmt.upper(), data, file_name=f"{stem}-{name}.{fmt}", key=f"dl_fig_{fmt}")
else:
    try:
        viz.check_image_export()
    except OpsdError as e:
        st.info(str(e))

st.subheader("Table")
tables = viz.run_tables(run)
table = st.selectbox("Table", list(tables), key="exp_table")
st.caption(f"{len(tables[table])} rows × {len(tables[table].columns)} columns")
cols = st.columns(len(viz.TABLE_FORMATS) + 1)
for col, fmt in zip(cols, viz.TABLE_FORMATS):
    col.download_button(fmt.upper(), lambda f=fmt: viz.table_bytes(tables[table], f),
                        file_name=f"{stem}-{table}.{fmt}", key=f"dl_tab_{fmt}")
cols[-1].download_button("summary.json", json.dumps(run["summary"], indent=1), file_name=f"{stem}-summary.json",
                         mime="application/json", key="dl_summary")

st.subheader("Report")
st.caption("One self-contained HTML file: run facts, the summary table, every figure and a few token heatmaps.")
tok = common.tokenizer(run)
st.download_button("HTML report", lambda: viz.report_html(run, signal, tokenizer=tok, title=f"OPSD-Diag: {stem}"),
                   file_name=f"{stem}-report.html", mime="text/html", key="dl_report")
