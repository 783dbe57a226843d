"""One home per setup job: loading a model, rendering a view and computing stop ids each live in one place.

The source of ``opsd_diag``, ``trainer`` and ``app`` is read with ``ast``; every function (a method counts as
``Class.method``, a nested function as the function around it) that calls one of a job's functions must be a
home of that job. A second loader, renderer or stop-id computation anywhere else fails here: reuse
``opsd_diag.engine.setup`` (the one setup of a diagnosis and a training run) instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("opsd_diag", "trainer", "app")

# job -> (the calls that do it, the functions allowed to make them: "path:function", with why)
JOBS = {
    "loads a model": ({"from_pretrained", "load_spec", "load_model"}, {
        "opsd_diag/io/models.py:_load": "the one from_pretrained of a model or tokenizer (offline rules, errors)",
        "opsd_diag/io/models.py:load_spec": "a ModelSpec's tokenizer and cached eval model",
        "opsd_diag/engine/setup.py:_load_models": "the one setup: every model of a run, by role",
        "trainer/roles.py:load_trainable": "the trainable copy of the student (io.models' uncached loader)",
        "opsd_diag/io/adapters.py:merge_adapter": "a LoRA adapter onto a model already loaded",
        "trainer/roles.py:load_lora": "a training run's LoRA adapter onto its student",
        "opsd_diag/zoo/build.py:build": "the toy-zoo builder reloads the checkpoints it staged itself",
        "opsd_diag/zoo/build.py:_train_chain": "the toy-zoo builder reloads the checkpoints it staged itself",
    }),
    "renders a view": ({"apply_chat_template", "render_chat", "encode_chat", "student_view", "teacher_view",
                        "student_renderer", "teacher_renderer", "base_renderer", "build_views"}, {
        "opsd_diag/io/chat_template.py:render": "the one apply_chat_template of a view (fixed day, one-line errors)",
        "opsd_diag/io/views.py:encode_chat": "a chat view's ids",
        "opsd_diag/io/views.py:student_view": "the student's view of one problem",
        "opsd_diag/io/views.py:teacher_view": "a teacher's view of one problem",
        "opsd_diag/io/views.py:base_renderer": "which renderer the base's prompts take",
        "opsd_diag/io/views.py:build_views": "every view of a set of problems",
        "opsd_diag/io/views.py:system_tokens": "the tokens a system prompt adds (for the fit checks)",
        "opsd_diag/engine/setup.py:prepare": "the one setup: each model's renderer",
        "opsd_diag/engine/setup.py:render": "the one setup: the views of a problem set (training and evaluation)",
        "opsd_diag/engine/setup.py:base_prompts": "the one setup: the base's prompts",
        "opsd_diag/io/models.py:end_of_turn_ids": "renders one turn to find the end-of-turn stop id",
        "*/workbench.py:prompt_previews": "the app's preview of the views, from tokenizers, before any model loads",
        "opsd_diag/zoo/samples.py:chat_prompt_ids": "the toy-zoo builder's own training prompts (no config yet)",
        "opsd_diag/zoo/evaluate.py:greedy_texts": "the toy-zoo builder's own evaluation prompts (no config yet)",
    }),
    "computes stop ids": ({"stop_token_ids", "end_of_turn_ids"}, {
        "opsd_diag/io/models.py:stop_token_ids": "the rule: end of turn first, then the EOS ids",
        "opsd_diag/engine/setup.py:prepare": "the one setup: the student's and each cross teacher's stop ids",
    }),
}


def _called(func: ast.expr) -> set[str]:
    """Every name in a call's target: ``hub.load_model.__wrapped__(...)`` calls load_model too."""
    names = set()
    while isinstance(func, ast.Attribute):
        names.add(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        names.add(func.id)
    return names


def call_sites(source: str, path: str) -> set[tuple[str, str, str]]:
    """(job, "path:function", call) for every call of a job's functions in ``source``."""
    out = set()

    def visit(node, owner):
        for child in ast.iter_child_nodes(node):
            here = owner
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                here = child.name if owner is None else f"{owner}.{child.name}" if isinstance(node, ast.ClassDef) \
                    else owner
            if isinstance(child, ast.Call):
                for job, (calls, _) in JOBS.items():
                    for name in _called(child.func) & calls:
                        out.add((job, f"{path}:{here or '<module>'}", name))
            visit(child, here)
    visit(ast.parse(source, path), None)
    return out


def _allowed(job: str, site: str) -> bool:
    homes = JOBS[job][1]
    path, func = site.split(":", 1)
    return site in homes or any(h.startswith("*/") and path.endswith(h[1:].split(":")[0]) and func == h.split(":")[1]
                                for h in homes)


def strays(sources: dict[str, str]) -> list[str]:
    """Every call of a job's functions outside the job's homes, as one line each."""
    return sorted(f"{site} {job} (calls {name})" for path, src in sources.items()
                  for job, site, name in call_sites(src, path) if not _allowed(job, site))


def project_sources() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def test_each_setup_job_has_one_home():
    bad = strays(project_sources())
    assert not bad, "a second home for a setup job (reuse opsd_diag.engine.setup):\n" + "\n".join(bad)


def test_every_home_still_does_its_job():
    """A home that no longer makes its calls is stale: the list above says where the job lives."""
    sites = {(job, site) for path, src in project_sources().items() for job, site, _ in call_sites(src, path)}
    for job, (_, homes) in JOBS.items():
        for home in homes:
            if not home.startswith("*/"):
                assert (job, home) in sites, f"{home} is listed as a home of '{job}' but makes none of its calls"


def test_a_planted_duplicate_is_caught():
    """The check fails on a second loader, renderer or stop-id computation (synthetic sources)."""
    planted = {
        "opsd_diag/engine/extra.py": (
            "from opsd_diag.io import models as hub\n"
            "class Again:\n"
            "    def load(self, spec):\n"
            "        return hub.load_spec(spec, 'cpu')\n"
            "def trainable(args):\n"
            "    return hub.load_model.__wrapped__(*args).train()\n"
            "def stops(model, tok):\n"
            "    return hub.stop_token_ids(model, tok)\n"),
        "trainer/views_again.py": (
            "def views(cfg, problems, tok):\n"
            "    def inner(p):\n"
            "        return tok.apply_chat_template([{'role': 'user', 'content': p}], tokenize=False)\n"
            "    return [inner(p['prompt']) for p in problems]\n"),
        "opsd_diag/engine/setup.py": "def prepare(cfg, roles):\n    return stop_token_ids(1, 2)\n",  # a home: fine
    }
    assert strays(planted) == [
        "opsd_diag/engine/extra.py:Again.load loads a model (calls load_spec)",
        "opsd_diag/engine/extra.py:stops computes stop ids (calls stop_token_ids)",
        "opsd_diag/engine/extra.py:trainable loads a model (calls load_model)",
        "trainer/views_again.py:views renders a view (calls apply_chat_template)",
    ]
