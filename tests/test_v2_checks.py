"""The shipped model checked on worlds built after the last look (check_world.py --spec ... --keep): the committed
figures are recomputed from the committed rows, the printed report is rendered from them, the world's spec came
before its results in git history, and the README and docs/verdict.md quote them."""
import json
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO))
from benchmarks.validity.v2 import check_world, report_look2, report_v2  # noqa: E402

HERE = REPO / "benchmarks" / "validity" / "v2"
CHECKED = ["kiln"]  # worlds checked since the seventh look, each with check_<world>.json/.txt and checks/ rows


def _committed(world: str) -> dict:
    return json.loads((HERE / f"check_{world}.json").read_text())


@pytest.mark.parametrize("world", CHECKED)
def test_check_figures_recompute_from_the_committed_rows(world):
    rows = check_world.with_lookahead(world, report_look2.world_rows(world),
                                      json.loads(report_look2.lookahead_file(world).read_text())["rows"])
    assert len(rows) == 22 and report_look2.ANALYSES[world] == HERE / "checks" / f"{world}_analysis.json"
    again = json.loads(json.dumps(report_v2.stats_jsonable(check_world.figures(world, rows))))
    assert again == _committed(world)
    printed = (HERE / f"check_{world}.txt").read_text()
    assert printed.endswith(check_world.text(again) + "\n")


@pytest.mark.parametrize("world", CHECKED)
def test_the_world_spec_was_committed_before_its_results(world):
    def first(path: str) -> int:  # commit time of the first commit that added the path
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%ct", "--", path], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
        assert out, f"{path} is not in git history"
        return int(out[-1])

    spec = first(f"sample_data/worlds/{world}.yaml")
    for path in (f"benchmarks/validity/v2/check_{world}.json", f"sample_data/worlds/{world}/models/build_report.json"):
        assert spec < first(path), path
