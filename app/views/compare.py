"""Compare: two diagnoses (summary, verdicts, headline figures) or two training runs (curves) side by side."""

from pathlib import Path

import pandas as pd
import streamlit as st

from app import common, training_figures
from opsd_diag import jobs, scoreboard
from opsd_diag.errors import OpsdError
from opsd_diag.report import tables

st.title("Compare")
root = Path(st.session_state.get("runs_root", "runs"))
what = st.radio("Compare", ["diagnoses", "training"], horizontal=True, key="cmp_what",
                format_func={"diagnoses": "two diagnoses", "training": "training runs"}.get)

if what == "diagnoses":
    runs = [str(p) for p in jobs.find_runs(root, "diagnosis") if (p / "summary.json").is_file()]
    if len(runs) < 2:
        st.info(f"Comparing needs two finished diagnoses under {root}/; there are {len(runs)}.")
        st.stop()
    a, b = st.columns(2)
    ra = a.selectbox("Diagnosis A", runs, index=0, key="cmp_a")
    rb = b.selectbox("Diagnosis B", runs, index=1, key="cmp_b")
    try:
        A, B = common.load(ra), common.load(rb)
    except OpsdError as e:
        st.error(common.plain(str(e)))
        st.stop()
    names = (f"A: {Path(ra).name}", f"B: {Path(rb).name}")
    m = st.columns(2)
    for col, run, name in zip(m, (A, B), names):
        acc = run.summary.student_accuracy
        col.metric(f"Student accuracy ({name})", "n/a" if acc.estimate is None else f"{acc.estimate:.3f}",
                   help=acc.text())
    st.subheader("Summary per teacher config")
    st.dataframe(tables.compare_summaries(A.summary, B.summary, ("A", "B")), hide_index=True, key="cmp_summary")
    st.subheader("Verdicts")
    st.dataframe(tables.compare_verdicts(A.summary, B.summary, ("A", "B")), hide_index=True, key="cmp_verdicts")
    st.subheader("Headline signals")
    for col, run, name in zip(st.columns(2), (A, B), names):
        with col:
            st.caption(common.md(name))
            st.plotly_chart(run.figure("headline"), key=f"cmp_head_{name}")
else:
    runs = [str(p) for p in jobs.find_runs(root, "training")]
    if not runs:
        st.info(f"No training runs under {root}/ yet.")
        st.stop()
    chosen = st.multiselect("Training runs", runs, default=runs[:2], key="cmp_train", format_func=lambda p: Path(p).name)
    records = {Path(r).name: training_figures.records_frame(jobs.read_jsonl(Path(r) / "metrics.jsonl")[0]) for r in chosen}
    metrics = sorted({c for f in records.values() for c in f.columns if c not in ("kind", "step", "method")
                      and pd.api.types.is_numeric_dtype(f[c])})
    if not metrics:
        st.info("These runs have no metrics yet.")
        st.stop()
    origins = {name: scoreboard.read_prediction(r) for name, r in zip(records, chosen)}
    st.dataframe(tables.compare_training({name: (f, jobs.status(r), origins[name])
                                          for (name, f), r in zip(records.items(), chosen)}),
                 hide_index=True, key="cmp_train_table")
    evals = [m for m in metrics if any(("kind" in f) and f.loc[f["kind"] == "eval", m].notna().any()
                                       for f in records.values() if m in f)]
    trains = [m for m in metrics if m not in evals]
    for m in [x for x in ("pass@1", "kl_to_initial") if x in evals]:
        st.plotly_chart(tables.compare_curves(records, m, "eval", origins), key=f"cmp_eval_{m}")
    pick = st.multiselect("Training metrics", trains, default=[x for x in ("loss",) if x in trains], key="cmp_metrics")
    for m in pick:
        st.plotly_chart(tables.compare_curves(records, m, "train", origins), key=f"cmp_train_{m}")
