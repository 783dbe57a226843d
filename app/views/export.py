"""Export: figures (HTML, PNG, SVG), tables (CSV, Parquet, JSON) and a one-file HTML report.

Every download holds its bytes before the click and does not rerun the page, so a click never
meets a file a rerun has dropped; file names carry the run, the table and the format.
"""

import streamlit as st

from app import common
from opsd_diag.errors import OpsdError
from opsd_diag.report import export

run = common.require_run()
stem = run.path.name
st.title("Export")

st.subheader("Figure")
c1, c2 = st.columns(2)
name = c1.selectbox("Figure", list(common.FIGURE_HELP), key="exp_fig")
with c2:
    signal = common.signal_select("exp_signal")
fig = run.figure(name, signal)
st.caption(common.FIGURE_HELP[name])
common.download("HTML (interactive, works offline)", export.figure_html(fig), f"{stem}-{name}-{signal}.html",
                f"dl_fig_html-{name}-{signal}", "text/html")
if export.image_export_available():
    if st.button("Render PNG and SVG", key="render_img"):
        try:
            st.session_state["img"] = ((name, signal), {f: export.figure_image(fig, f) for f in export.IMAGE_FORMATS})
        except OpsdError as e:
            st.error(common.plain(str(e)))
    shown, images = st.session_state.get("img") or (None, {})
    for fmt, data in (images if shown == (name, signal) else {}).items():
        common.download(fmt.upper(), data, f"{stem}-{name}-{signal}.{fmt}", f"dl_fig_{fmt}")
else:
    try:
        export.check_image_export()
    except OpsdError as e:
        st.info(f"{e}. `make app` installs it; it also needs Chromium (e.g. apt-get install chromium).")

st.subheader("Table")
names = run.table_names()
table = st.selectbox("Table", names, key="exp_table")
frame = run.export_table(table)
st.caption(f"{table}: {len(frame)} rows × {len(frame.columns)} columns")
cols = st.columns(len(export.TABLE_FORMATS) + 1)
big = len(frame) > common.SMALL_TABLE
ready = st.session_state.setdefault("exp_ready", set())
if big and table not in ready:
    if cols[0].button(f"Prepare the {table} files", key=f"prep-{table}",
                      help="a large table: its files are made once you ask"):
        ready.add(table)
        st.rerun()
else:
    for col, fmt in zip(cols, export.TABLE_FORMATS):
        with col:
            common.download(fmt.upper(), common.table_bytes(run, table, fmt), f"{stem}-{table}.{fmt}",
                            f"dl_tab_{table}_{fmt}")
with cols[-1]:
    # the run's whole summary.json: a name of its own (the 'summary' table's JSON is {stem}-summary.json)
    common.download("summary.json", run.summary.model_dump_json(indent=1, exclude_unset=True),
                    f"{stem}-summary-file.json", "dl_summary", "application/json",
                    help="the run's whole summary.json (every aggregate, verdict and setting)")

st.subheader("Report")
st.caption("One self-contained HTML file: run facts, the summary table, every figure and a few token heatmaps.")
tok = common.tokenizer(run)
if st.button("Build the HTML report", key="build_report"):
    st.session_state["report"] = (str(run.path), signal,
                                  run.report_html(signal, tokenizer=tok, title=f"OPSD-Diag: {stem}"))
built = st.session_state.get("report")
if built and built[:2] == (str(run.path), signal):
    common.download("HTML report", built[2], f"{stem}-report-{signal}.html", "dl_report", "text/html")
