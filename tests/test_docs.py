"""The documentation stays true: generated parts equal the code, the README's Python example runs,
every relative link resolves, and no source file cites notes that live outside the repository."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from conftest import tiny_config, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SOURCE_DIRS = ("opsd_diag", "trainer", "app", "tests", "benchmarks")


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def _without_code(text: str) -> str:
    """Markdown with fenced blocks and inline code removed (links inside code are not links)."""
    return re.sub(r"`[^`\n]*`", "", _without_code_blocks(text))


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file (repeated headings get -1, -2, ...)."""
    out: set[str] = set()
    for line in _without_code_blocks(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n, candidate = 0, slug
            while candidate in out:
                n += 1
                candidate = f"{slug}-{n}"
            out.add(candidate)
    return out


# ------------------------------------------------------------------------------ (a) generated parts

def test_generated_docs_are_current(capsys):
    rc = _generator().main(check=True)
    assert rc == 0, capsys.readouterr().err + "\nrun: python docs/generate.py"


def test_config_reference_lists_every_key():
    from opsd_diag.config.spec import DiagnosisConfig, EvalSpec, TrainingSpec

    text = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    for prefix, model in (("", DiagnosisConfig), ("training.", TrainingSpec), ("training.eval.", EvalSpec)):
        for name in model.model_fields:
            assert f"| `{prefix}{name}` |" in text, f"{prefix}{name} missing from docs/config.md"
    assert "| `sampling.num_samples` |" in text and "| `training.eval.pass_k` |" in text


# --------------------------------------------------------------------------- (b) the README example

def readme_example() -> str:
    """The fenced python block of the README's "Python API" section."""
    text = README.read_text(encoding="utf-8")
    assert "\n## Python API\n" in text, "README.md lost its '## Python API' section"
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert m, "the README's Python API section has no ```python block"
    return m.group(1)


@pytest.fixture(scope="module")
def finished_run(ci_zoo, tmp_path_factory) -> Path:
    """A real finished run of a tiny config, with the predictor (so it has verdicts)."""
    from opsd_diag.engine.diagnose import run_diagnosis
    from opsd_diag.config.spec import from_dict
    from opsd_diag.zoo import task

    root = tmp_path_factory.mktemp("docs_run")
    data = write_jsonl(root / "problems.jsonl", task.generate(4, 11))
    cfg = from_dict(tiny_config(ci_zoo, data, ideal={"budget": 24, "k": 2, "m": 2}))
    run_diagnosis(cfg, root / "run", show_progress=False)
    return root / "run"


@pytest.mark.slow  # runs a model end to end: `make test` only, not `make test-fast`
def test_readme_python_example_runs(finished_run, tmp_path, monkeypatch, capsys):
    code = readme_example()
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 12, "keep the README example short"
    assert code.count('"runs/quickstart"') == 1, "the example must load the run by the path this test replaces"
    code = code.replace('"runs/quickstart"', repr(str(finished_run)))
    monkeypatch.chdir(tmp_path)  # the example writes relative paths, under runs/ (git ignores it)
    (tmp_path / "runs").mkdir()
    namespace: dict = {}
    exec(compile(code, "README.md (Python API)", "exec"), namespace)  # noqa: S102 (our own README)
    out = capsys.readouterr().out
    assert "'status': 'finished'" in out and "n_tokens" in out  # the facts and the summary table
    verdicts = namespace["run"].verdicts()
    assert verdicts is not None and set(verdicts["verdict"]) <= {"helps", "unclear", "hurts"}
    assert (tmp_path / "runs" / "entropy.html").is_file()
    assert namespace["html"].lstrip().startswith("<") and "a_d2" in namespace["html"]
    files = [Path(f) for f in namespace["files"]]
    assert files and all(f.is_file() for f in files)
    assert {"report.html", "tokens.csv", "verdicts.csv"} <= {f.name for f in files}


# ------------------------------------------------------------------------------------- (c) links

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall(_without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif not dest.resolve().is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.name}: broken links: {broken}"


def test_readme_is_a_short_front_door():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


# ----------------------------------------------------------------- (d) nothing cites outside notes

# Built from parts so that this file does not match itself.
OUTSIDE = tuple(n + ".md" for n in ("SIGNALS", "DESIGN", "STYLE")) + ("../" + "shared",)


def _source_files() -> list[Path]:
    return [p for d in SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]


def test_no_source_file_cites_notes_outside_the_repository():
    hits = [f"{p.relative_to(ROOT)}: {name}" for p in _source_files() for name in OUTSIDE
            if name in p.read_text(encoding="utf-8")]
    assert not hits, f"cite docs/ instead: {hits}"


def test_docs_cite_nothing_outside_the_repository():
    hits = [f"{p.relative_to(ROOT)}: {name}" for p in [README, *DOCS] for name in OUTSIDE
            if name in p.read_text(encoding="utf-8")]
    assert not hits, hits


def test_docs_cited_by_the_code_exist():
    """Every docs/<page>.md a source file names exists, and every cited pitfall number is in design.md."""
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = design.split("\n## Pitfalls\n", 1)[1].split("\n## ", 1)[0]
    numbered = [int(n) for n in re.findall(r"^(\d+)\. ", section, re.MULTILINE)]
    assert numbered == list(range(1, len(numbered) + 1)) and len(numbered) >= 10, numbered
    missing, bad = set(), set()
    for p in _source_files():
        text = p.read_text(encoding="utf-8")
        missing |= {f"{p.relative_to(ROOT)}: {d}" for d in re.findall(r"docs/[\w-]+\.md", text)
                    if not (ROOT / d).is_file()}
        bad |= {f"{p.relative_to(ROOT)}: pitfall {n}" for n in re.findall(r"pitfall (\d+)", text)
                if int(n) not in numbered}
    assert not missing, f"source files cite missing docs: {sorted(missing)}"
    assert not bad, f"source files cite pitfalls that docs/design.md does not list: {sorted(bad)}"
