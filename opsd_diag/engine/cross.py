"""Which teacher configs have another tokenizer than the student, and what each of them needs.

A teacher whose vocabulary differs from the student's is scored on its own re-tokenisation of the
student's completion, span by span (``engine.cross_scoring``, docs/signals.md). Its view is
rendered with its own tokenizer and chat template. Every check here runs in ``engine.setup.prepare``, before
the run directory exists; what remains unsupported is refused in one line.

The base model scores each config on the tokens of the family it belongs to: the student's
(for every config) or a cross teacher's (for that config); a base that shares neither is refused.
"""

from __future__ import annotations

from opsd_diag.engine.cross_scoring import CrossTeacher
from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.io.models import check_compatible, load_tokenizer, vocab_fingerprint

SWAPPED = ("the manifest's teachers are not the ones that scored this run's tables (manifest.json edited, or copied "
           "from another run): use the diagnosis' own run directory, or rerun the diagnosis")


def plan(teachers, named: dict, teacher_toks: dict[str, object], refuse=None) -> dict[str, CrossTeacher]:
    """Check every model against the tokenizer(s) it must share; return the cross-tokenizer configs
    (their ``base_prompts`` are set by ``engine.setup`` once the views are rendered,
    ``io.view_set.base_renderer``). The one planner of a diagnosis and of a training run (one teacher).

    ``named`` is ``engine.setup``'s role -> (name, tokenizer, model) map (student first, then base and
    teachers); ``teacher_toks`` maps every non-self teacher config to its tokenizer; ``refuse(role, model)``
    raises what the caller cannot do with a teacher of another tokenizer (a training method's one line).
    """
    student_name, student_tok, _ = named["student"]
    ref = vocab_fingerprint(student_tok)
    cross = [t for t in teachers if not t.is_self and vocab_fingerprint(teacher_toks[t.name]) != ref]
    if not cross:
        check_compatible(named)  # today's check: every model shares the student's tokenizer
        return {}
    base = named.get("base")
    base_fp = None if base is None else vocab_fingerprint(base[1])
    same = {role: v for role, v in named.items()
            if not (role.startswith("teacher '") and role[9:-1] in {t.name for t in cross})
            and not (role == "base" and base_fp != ref)}
    check_compatible(same)  # everything that shares the student's tokenizer
    if base is not None and base_fp != ref and len(cross) < len(teachers):
        raise OpsdError(f"the base model '{base[0]}' has another tokenizer than the student '{student_name}' while some "
                        "teacher configs share the student's: give each family its own diagnosis")
    out = {}
    for t in cross:
        tok = teacher_toks[t.name]
        role = f"teacher '{t.name}'"
        if refuse is not None:
            refuse(role, t.model)
        if not getattr(tok, "is_fast", False):
            raise OpsdError(f"{role} (model '{t.model}') has another tokenizer than the student and it is not a fast "
                            "tokenizer: the alignment needs offset mappings (save it with a tokenizer.json)")
        side = None if base is None else "student" if base_fp == ref else "teacher"
        if side == "teacher" and base_fp != vocab_fingerprint(tok):
            raise OpsdError(f"the base model '{base[0]}' shares neither the student's tokenizer nor that of {role}: "
                            "a base must be of the student's or the teacher's family")
        check_compatible({role: named[role], **({"base": base} if side == "teacher" else {})})
        out[t.name] = CrossTeacher(tok, [], tok.eos_token_id, side)  # its stop ids: engine.setup, with the student's
    return out


def check_scored(run_dir, cfg, configs: list[str] | None = None, *, code: bool = False) -> None:
    """Each teacher the run's manifest names for ``configs`` (all by default) is of the family its tables were
    scored with: a config of another tokenizer has its ``left_out.<config>`` column in rollouts.parquet (it was
    scored span by span), the others have none. Only tokenizers are read, before any model loads, with remote
    code only where ``code`` (the user's flag, already applied to ``cfg``) allows it; a tokenizer that does not
    load is left to the model loads that follow."""
    scored_other = {c[len("left_out."):] for c in store.table_columns(run_dir, "rollouts") if c.startswith("left_out.")}

    def fingerprint(spec) -> str:
        return vocab_fingerprint(load_tokenizer(spec.model, spec.revision, bool(spec.allow_download),
                                                code and bool(spec.trust_remote_code)))
    try:
        student = fingerprint(cfg.student)
    except OpsdError:
        return
    for t in (t for t in cfg.teachers if configs is None or t.name in configs):
        other = False
        if not t.is_self:
            try:
                other = fingerprint(t) != student
            except OpsdError:
                continue
        if other != (t.name in scored_other):
            was, now = ("another", "the student's") if t.name in scored_other else ("the student's", "another")
            raise OpsdError(f"config '{t.name}' was scored with a teacher of {was} tokenizer, but the model its "
                            f"manifest names has {now}: {SWAPPED}")
