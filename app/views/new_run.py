"""New diagnosis: a form (models, teachers and their contexts, data and field mapping, sampling, scoring,
predictor budget) with live previews and a cost estimate, or a config file; the YAML is the saved
artefact. Starting runs `opsd-diag run` as a job, followed phase by phase with an ETA."""

import shlex
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException

from app import common, draft, jobs, workbench
from opsd_diag import jobs as job_protocol
from opsd_diag.errors import OpsdError
from opsd_diag.io import store

st.title("New diagnosis")
root = Path(st.session_state.get("runs_root", jobs.RUNS_ROOT))
DRAFT = {"prefix": ("nr_",), "extra": ("out_dir", "config_path"), "skip": ("nr_save", "nr_upload", "nr_follow")}
draft.restore(root, **DRAFT)  # a reload keeps the form's entries (the URL names this tab's draft)
mode = st.radio("Describe the diagnosis", ["form", "file"], horizontal=True, key="nr_mode",
                format_func={"form": "with the form", "file": "with a config file"}.get)


@st.cache_resource(show_spinner="loading the tokenizer", max_entries=4)
def _tokenizer(model: str):
    from opsd_diag.io.models import load_tokenizer

    return load_tokenizer(model)


def teacher_fields(i: int) -> dict:
    default_model = i == 0
    with st.container(border=True):
        a, b, c = st.columns([1, 1, 2])
        name = a.text_input("Name", ["teacher", "self_full_solution"][i] if i < 2 else f"teacher{i + 1}",
                            key=f"nr_t{i}_name")
        kind = b.radio("Teacher", ["model", "self"], index=0 if default_model else 1, key=f"nr_t{i}_kind",
                       format_func={"model": "a model", "self": "the student + a context"}.get)
        if kind == "model":
            model = c.text_input("Teacher model (hub id or folder)", "sample_data/models/teacher", key=f"nr_t{i}_model")
            return {"name": name, "model": model}
        options = [*workbench.CONTEXTS, "custom"]
        ctx = c.selectbox("Context", options, index=options.index("full_solution"), key=f"nr_t{i}_ctx",
                          help="what the self-teacher is shown besides the question")
        out = {"name": name, "model": "self", "context": ctx}
        if ctx == "custom":
            out["context"] = st.text_area("Template (use {prompt}; may use {solution}, {answer}, {partial_solution},"
                                          " {hint})", "{prompt}\n\nHint: {hint}", key=f"nr_t{i}_tpl")
        if ctx == "partial_solution":
            out["partial_fraction"] = st.slider("Share of solution lines shown", 0.1, 1.0, 0.5, key=f"nr_t{i}_pf")
        return out


def form() -> dict:
    st.subheader("Models")
    a, b = st.columns(2)
    student = a.text_input("Student model (hub id or folder)", "sample_data/models/student", key="nr_student")
    base = b.text_input("Base model (the teacher's pre-reasoning checkpoint; empty: none)", "sample_data/models/base",
                        key="nr_base")
    st.subheader("Teachers")
    n = st.number_input("Number of teacher configs", 1, 8, 2, key="nr_n_teachers")
    teachers = [teacher_fields(i) for i in range(int(n))]

    st.subheader("Data")
    source = st.radio("Problems", ["bundled", "path", "upload"], horizontal=True, key="nr_source",
                      format_func={"bundled": "a bundled split", "path": "a file path", "upload": "upload a file"}.get)
    path = ""
    if source == "bundled":
        options = workbench.bundled_data()
        dev = next((i for i, o in enumerate(options) if Path(o).name == "dev.jsonl"), 0)
        path = st.selectbox("Bundled split", options, index=dev, key="nr_bundled") if options else ""
    elif source == "path":
        path = st.text_input("Problem file (JSONL, CSV or Parquet)", key="nr_data_path")
    else:
        up = st.file_uploader("Problem file", type=["jsonl", "json", "csv", "parquet"], key="nr_upload")
        if up is not None:
            target = root / "uploads" / Path(up.name).name
            target.parent.mkdir(parents=True, exist_ok=True)
            store.atomic_write_bytes(target, up.getvalue())
            path = str(target)
    a, b, c, d, e = st.columns(5)
    limit = a.number_input("First N problems", 1, 1_000_000, 12, key="nr_limit")
    fields = {k: col.text_input(f"'{k}' column", key=f"nr_field_{k}", placeholder=k)
              for k, col in zip(("prompt", "answer", "solution", "id"), (b, c, d, e))}
    data = {"path": path, "limit": int(limit), "fields": {k: v for k, v in fields.items() if v}}

    st.subheader("Sampling, scoring and the predictor")
    a, b, c, d = st.columns(4)
    sampling = {"num_samples": a.number_input("Samples per prompt", 1, 1024, 4, key="nr_samples"),
                "temperature": b.number_input("Sampling temperature", 0.0, 5.0, 1.0, 0.1, key="nr_temp"),
                "max_completion_length": c.number_input("Max new tokens", 1, 32768, 72, key="nr_max_len"),
                "teacher_samples": d.number_input("Teacher samples per prompt", 0, 1024, 2, key="nr_teacher_samples")}
    a, b, c, d = st.columns(4)
    analysis = {"checker": a.selectbox("Answer checker", ["auto", "toy", "boxed", "last_number", "exact"], index=1,
                                       key="nr_checker")}
    scoring = {"top_k": b.number_input("Top-k alternatives kept", 0, 100, 5, key="nr_topk")}
    predictor = c.checkbox("Run the predictor (verdicts)", True, key="nr_ideal")
    ideal = None
    if predictor:
        a, b, c = st.columns(3)
        ideal = {"budget": a.number_input("Predictor budget (continuations)", 1, 10_000_000, 400, key="nr_budget"),
                 "k": b.number_input("Candidates per model (k)", 1, 32, 3, key="nr_k"),
                 "m": c.number_input("Continuations per candidate (m)", 1, 256, 4, key="nr_m")}
    out = {"student": {"model": student}, "base": {"model": base} if base else None, "teachers": teachers,
           "data": data, "sampling": sampling, "scoring": scoring, "analysis": analysis, "shard_size": 4}
    if ideal:
        out["ideal"] = ideal
    return out


def previews(cfg) -> None:
    try:
        raw = workbench.raw_rows(cfg.data.path)
        probs = workbench.problems(cfg.data.model_dump(mode="json"), 5)
    except OpsdError as e:
        st.error(common.plain(str(e)))
        return
    with st.expander("The first rows of the data, and what each placeholder receives", expanded=False):
        st.dataframe(raw, hide_index=True, key="nr_raw")
        for t in cfg.teachers:
            if t.is_self:
                try:
                    vals = workbench.placeholder_values(probs[0], t.context, t.partial_fraction)
                except OpsdError as e:
                    st.error(common.plain(f"{t.name}: {e}"))
                    continue
                st.markdown(f"**{t.name}** (first problem)")
                st.table({k: [v] for k, v in vals.items()})
    with st.expander("The exact prompt each model sees (chat template applied)", expanded=False):
        i = st.selectbox("Problem", range(len(probs)), format_func=lambda j: probs[j]["id"], key="nr_preview_problem")
        try:
            own = {t.name: _tokenizer(t.model) for t in cfg.teachers if not t.is_self}  # their own templates
            views = workbench.prompt_previews(cfg, probs[i], _tokenizer(cfg.student.model), own)
        except OpsdError as e:
            st.error(common.plain(str(e)))
            return
        for v in views:
            st.markdown(f"**{v.who}** · {v.n_tokens} tokens" + (" · context truncated" if v.truncated else ""))
            st.code(v.text, language=None)


def cost(cfg) -> None:
    est = workbench.cost_estimate(cfg, workbench.count_problems(cfg), root)
    cols = st.columns(5)
    cols[0].metric("Rollouts", f"{est['rollouts']:,}")
    cols[1].metric("Generated tokens (at most)", f"{est['generated_tokens'] + est['teacher_tokens']:,}")
    cols[2].metric("Scored tokens (at most)", f"{est['scored_tokens']:,}")
    cols[3].metric("Predictor continuations", f"{est['continuations']:,}")
    cols[4].metric("Estimated time", workbench.duration(est["seconds"]))
    st.caption(f"Timed from {est['timed_from']} (same student, this machine)." if est["timed_from"] else
               "No finished run of this student to time from yet: the time appears after the first one.")


config_path, cfg = None, None
if mode == "form":
    try:
        fields = form()
    except (StreamlitAPIException, TypeError, ValueError):
        if not draft.applied():
            raise
        draft.forget(root, DRAFT["prefix"], DRAFT["extra"])  # a restored value no widget takes: start afresh
        st.rerun()
    try:
        cfg = workbench.build_config(fields)
    except OpsdError as e:
        st.error(common.plain(str(e)))
    if cfg is not None:
        previews(cfg)
        st.subheader("Cost")
        cost(cfg)
        st.subheader("The config file")
        st.code(workbench.config_yaml(cfg), language="yaml")
        a, b, c = st.columns([3, 1, 1])
        save_as = a.text_input("Save as", str(root / "configs" / "diagnosis.yaml"), key="nr_save_as")
        replace = b.checkbox("replace", key="nr_replace")
        if c.button("Save", key="nr_save"):
            try:
                st.success(f"Saved {workbench.save_config(cfg, save_as, replace)}")
            except OpsdError as e:
                st.error(common.plain(str(e)))
        config_path = save_as
else:
    config_path = st.text_input("Config file (YAML)", value="sample_data/configs/quickstart.yaml", key="config_path")

out = st.text_input("Run directory", key="out_dir", placeholder=f"{root}/<config name>-<time> (default)",
                    help="a new or empty folder; an existing run of the same config is resumed")
c1, c2 = st.columns(2)
validate = c1.button("Validate config", key="validate") if mode == "file" else False
start = c2.button("Start diagnosis", type="primary", key="start", disabled=mode == "form" and cfg is None)
draft.save(root, **DRAFT)

if validate or start:
    try:
        common.check_fields({"config file": config_path, "run directory": out})
        if mode == "form":  # the YAML is the artefact the run is made from: saved first, never over another
            workbench.save_config(cfg, config_path, overwrite=st.session_state.get("nr_replace", False))
        checked = jobs.checked_config(config_path)
    except OpsdError as e:
        st.error(common.plain(str(e)))
    else:
        st.success(f"Valid: student {checked.student.model}, teachers {', '.join(t.name for t in checked.teachers)}, "
                   f"{checked.sampling.num_samples} samples per prompt, base: "
                   f"{checked.base.model if checked.base else 'none'}")
        run_dir = Path(out) if out else store.default_run_dir(config_path, root)
        if start and jobs.progress(run_dir).active:
            st.warning(f"A diagnosis into {run_dir} is already running.")
        elif start:
            try:
                jobs.start(config_path, run_dir)
                st.session_state["job"] = str(run_dir)
                st.query_params["job"] = str(run_dir)  # a reload finds the job it follows
            except OpsdError as e:
                st.error(common.plain(str(e)))


def follow(run_dir: str, active: bool) -> None:
    p = jobs.progress(run_dir)
    if active and not p.active:
        st.rerun()  # the whole page, so the fragment stops polling
    st.progress(p.fraction if p.status == "finished" else sum(ph.fraction for ph in p.phases) / len(p.phases),
                text=p.text)
    cols = st.columns(len(p.phases))
    for col, ph in zip(cols, p.phases):
        detail = f"{ph.done}/{ph.total}" if ph.state == "running" and ph.total and ph.name != "aggregates" else ""
        eta = f" · ETA {workbench.duration(ph.eta_s)}" if ph.eta_s is not None else ""
        col.progress(ph.fraction, text=f"{ph.name}: {ph.state} {detail}{eta}")
    if p.error:
        st.error(p.error)
    if p.status == "finished":
        st.success(f"Finished: {run_dir}")
        if st.button("Open this run", key="open_run"):
            common.open_run(run_dir)
            st.switch_page("views/overview.py")
    with st.expander("Log", expanded=p.status in ("failed", "died")):
        st.code(p.log_tail or "(no output yet)")


job = draft.followed_job("job")
if not job:  # a diagnosis running under the runs folder (started in another tab, or before a restart)
    running = [p for p in job_protocol.find_runs(root, "diagnosis") if jobs.progress(p).active]
    if running:
        st.info(f"A diagnosis is running in {running[0]}.")
        if st.button("Follow it", key="nr_follow"):
            st.session_state["job"] = str(running[0])
            st.rerun()
if job:
    st.subheader(f"Progress of {job}")
    argv = (job_protocol.read_status(job) or {}).get("argv")
    if argv:
        st.code(shlex.join(argv), language="bash")
    active = jobs.progress(job).active
    st.fragment(follow, run_every=2.0 if active else None)(job, active)
