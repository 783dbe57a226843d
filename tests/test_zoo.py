"""The bundled toy world: the build pipeline (reduced size in CI) and the shipped models."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, ZOO
from transformers import AutoModelForCausalLM, AutoTokenizer

from opsd_diag.errors import OpsdError
from opsd_diag.zoo import build as zoo_build
from opsd_diag.zoo import rebuild_check, task

pytestmark = pytest.mark.slow  # runs models end to end: `make test` only, not `make test-fast`

ROLES = ("base", "teacher", "student")


def _hashes(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_task_is_seeded_and_levels_need_more_steps():
    a, b = task.generate(40, 5), task.generate(40, 5)
    assert a == b and a != task.generate(40, 6)
    for p in a:
        n_ops = task.LEVELS[p["meta"]["difficulty"]]
        assert len(p["solution"].splitlines()) == n_ops
        x = p["meta"]["start"]
        for op in p["meta"]["ops"]:
            x = task.apply_op(x, op[0], int(op[1:]))
        assert str(x) == p["answer"]


def test_ci_build_is_loadable_and_reproducible(ci_zoo, tmp_path):
    for role in ROLES:
        model = AutoModelForCausalLM.from_pretrained(ci_zoo / role)
        assert model.config.model_type == "qwen3"
    card = (ci_zoo / "MODEL_CARD.md").read_text()
    assert "| student + full solution |" in card and "level 4" in card
    again = tmp_path / "again"
    zoo_build.build(again, size="ci", seed=0, log=lambda *a: None)
    for role in ROLES:  # same seed -> bit-identical weights
        assert _hashes(ci_zoo / role) == _hashes(again / role), role
    same, section = rebuild_check.compare(ci_zoo, again)  # what `rebuild_check --record` writes to the card
    assert same and section.count("| yes |") == 4, section
    card = tmp_path / "MODEL_CARD.md"
    card.write_text("# card\n\nbody\n")
    rebuild_check.record(card, section)
    rebuild_check.record(card, section)  # a second record replaces the first
    assert card.read_text().count(rebuild_check.RECORD_HEADING) == 1 and card.read_text().startswith("# card\n\nbody")


def test_bad_build_inputs_leave_models_untouched(ci_zoo, tmp_path, monkeypatch):
    before = _hashes(ci_zoo)
    with pytest.raises(OpsdError, match="invalid --size 'huge'"):
        zoo_build.build(ci_zoo, size="huge")
    monkeypatch.setattr(zoo_build, "train", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        zoo_build.build(ci_zoo, size="ci", log=lambda *a: None)  # a crash mid-build
    assert _hashes(ci_zoo) == before
    assert not [p for p in ci_zoo.parent.iterdir() if p.name.startswith(".zoo-build-")]
    assert not [p for p in ci_zoo.iterdir() if p.name.startswith(".zoo-build-")]


@pytest.mark.parametrize("args, match", [
    (["--out", "/proc/opsd-zoo"], "cannot write the zoo to /proc/opsd-zoo"),
    (["--size", "huge"], "invalid --size 'huge'"),
])
def test_zoo_build_cli_errors(tmp_path, args, match):
    r = subprocess.run([sys.executable, "-m", "opsd_diag.cli", "zoo", "build", "--problems-dir", str(tmp_path / "p"),
                        *(["--out", str(tmp_path / "m")] if "--out" not in args else []), *args],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"opsd-diag: error: {r.stderr.split('error: ', 1)[1].strip()}"]
    assert match in r.stderr
    assert not (tmp_path / "m").exists() and not (tmp_path / "p").exists()


# ------------------------------------------------------------------ the shipped models

@pytest.fixture(scope="module")
def shipped():
    report = json.loads((ZOO / "build_report.json").read_text())
    toks = {r: AutoTokenizer.from_pretrained(ZOO / r) for r in ROLES}
    models = {r: AutoModelForCausalLM.from_pretrained(ZOO / r).eval() for r in ROLES}
    return report, toks, models


def test_shipped_zoo_is_small_and_standard(shipped):
    report, toks, models = shipped
    total = sum(p.stat().st_size for p in ZOO.rglob("*") if p.is_file())
    assert total < 25e6
    vocab = toks["student"].get_vocab()
    assert all(t.get_vocab() == vocab for t in toks.values())
    assert all((ZOO / r / "tokenizer.json").read_bytes() == (ZOO / "student/tokenizer.json").read_bytes() for r in ROLES)
    msgs = [{"role": "user", "content": "Start at 1. Apply in order, mod 10: a)+2. What is the result?"}]
    text = toks["student"].apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and msgs[0]["content"] in text
    assert "ü".encode() and toks["student"].decode(toks["student"]("héllo ü 日本")["input_ids"]) == "héllo ü 日本"
    ids = toks["teacher"](text, add_special_tokens=False, return_tensors="pt")
    out = models["teacher"].generate(**ids, do_sample=False, max_new_tokens=20)
    assert "Answer:" in toks["teacher"].decode(out[0, ids["input_ids"].shape[1]:])
    assert report["params"]["student"] < report["params"]["teacher"]


def test_shipped_zoo_reproduces_model_card_subset(shipped):
    """Greedy accuracy on the card's fixed subset, re-measured; tolerance: 1 problem per level."""
    report, toks, models = shipped
    test = [json.loads(l) for l in (REPO / "sample_data/problems/test.jsonl").read_text().splitlines()]
    subset = zoo_build.eval_problems(test, zoo_build.SUBSET_PER_LEVEL)
    rows = {name: (name, None, 1.0) for name in ROLES}
    rows.update({f"student + {label}": ("student", ctx, frac) for label, (ctx, frac) in zoo_build.CARD_CONTEXTS.items()})
    for row, (name, ctx, frac) in rows.items():
        correct = zoo_build.greedy_correct(models[name], toks[name], subset, zoo_build.user_texts(subset, ctx, frac))
        got = zoo_build.accuracy_by_level(subset, correct)
        for level, value in report["subset_accuracy"][row].items():
            tol = 1.0 / zoo_build.SUBSET_PER_LEVEL + 1e-9
            assert abs(got[level] - value) <= (tol if level != "all" else tol / 2), (row, level, got, value)


def test_model_card_claims_hold(shipped):
    acc = shipped[0]["accuracy"]
    hard = "level 4"
    assert acc["teacher"][hard] >= acc["student"][hard] + 0.15       # teacher clearly above student
    assert acc["student"][hard] >= acc["base"][hard] + 0.05          # student above base
    assert acc["base"][hard] <= 0.3                                  # one-shot answers stay near chance


def test_student_uses_the_full_solution(shipped):
    acc = shipped[0]["accuracy"]
    full, alone = acc["student + full solution"], acc["student"]
    assert full["level 4"] >= alone["level 4"] + 0.15 and full["all"] >= alone["all"] + 0.15