"""A finished run's teachers against the tokenizer families its tables were scored with (``check_scored``).

A teacher whose vocabulary differs from the student's is scored on its own re-tokenisation of the
student's completion, span by span (``engine.cross_scoring``, docs/signals.md); which teachers those are,
and what each needs, is planned with every other check of a run's setup (``engine.setup.plan_cross``).
A later command (predict, ``opsd-train --from-diagnosis``) that reads a run whose manifest names a teacher
of another family than the one its tables were scored with is refused here, before any model loads.
"""

from __future__ import annotations

from opsd_diag.errors import OpsdError
from opsd_diag.io import store
from opsd_diag.io.models import load_tokenizer, vocab_fingerprint

SWAPPED = ("the manifest's teachers are not the ones that scored this run's tables (manifest.json edited, or copied "
           "from another run): use the diagnosis' own run directory, or rerun the diagnosis")


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
