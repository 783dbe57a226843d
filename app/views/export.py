"""Export: figures (HTML, PNG, SVG), tables (CSV, Parquet, JSON) and a one-file HTML report."""

from pathlib import Path

import streamlit as st

from app import common
from opsd_diag.errors import OpsdError
from opsd_diag.report import export

run = common.require_run()
stem = Path(st.session_state["run_dir"]).name
st.title("Export")

st.subheader("Figure")
c1, c2 = st.columns(2)
name = c1.selectbox("Figure", list(common.FIGURE_HELP), key="exp_fig")
with c2:
    signal = common.signal_select("exp_signal")
fig = run.figure(name, signal)
st.caption(common.FIGURE_HELP[name])
st.download_button("HTML (interactive, works offline)", lambda: export.figure_html(fig),
                   file_name=f"{stem}-{name}.html", mime="text/html", key="dl_fig_html")
if export.image_export_available():
    if st.button("Render PNG and SVG", key="render_img"):
        try:
            st.session_state["img"] = ((name, signal), {f: export.figure_image(fig, f) for f in export.IMAGE_FORMATS})
        except OpsdError as e:
            st.error(str(e))
    shown, images = st.session_state.get("img") or (None, {})
    for fmt, data in (images if shown == (name, signal) else {}).items():
        st.download_button(fmt.upper(), data, file_name=f"{stem}-{name}.{fmt}", key=f"dl_fig_{fmt}")
else:
    try:
        export.check_image_export()
    except OpsdError as e:
        st.info(str(e))

st.subheader("Table")
tables = run.tables()
table = st.selectbox("Table", list(tables), key="exp_table")
st.caption(f"{len(tables[table])} rows × {len(tables[table].columns)} columns")
cols = st.columns(len(export.TABLE_FORMATS) + 1)
for col, fmt in zip(cols, export.TABLE_FORMATS):
    col.download_button(fmt.upper(), lambda f=fmt: export.table_bytes(tables[table], f),
                        file_name=f"{stem}-{table}.{fmt}", key=f"dl_tab_{fmt}")
cols[-1].download_button("summary.json", run.summary.model_dump_json(indent=1, exclude_unset=True), file_name=f"{stem}-summary.json",
                         mime="application/json", key="dl_summary")

st.subheader("Report")
st.caption("One self-contained HTML file: run facts, the summary table, every figure and a few token heatmaps.")
tok = common.tokenizer(run)
st.download_button("HTML report", lambda: run.report_html(signal, tokenizer=tok, title=f"OPSD-Diag: {stem}"),
                   file_name=f"{stem}-report.html", mime="text/html", key="dl_report")
