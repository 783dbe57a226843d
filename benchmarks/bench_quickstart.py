"""Wall time of the bundled example (`opsd-diag run sample_data/configs/quickstart.yaml`).

Target (issue 3): under 2 minutes on 2 CPU cores. Prints the time, the ratio to the target, and
the import/start-up share (a bare `python -c "import opsd_diag.engine.diagnose"` measured side by side).
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        run = timed([sys.executable, "-m", "opsd_diag.cli", "run", "sample_data/configs/quickstart.yaml",
                     "--out", str(Path(d) / "q"), "--quiet"])
    start = timed([sys.executable, "-c", "import opsd_diag.engine.diagnose"])
    print("| measure | seconds |\n|---|---|")
    print(f"| quickstart run (CLI, end to end) | {run:.1f} |")
    print(f"| of which Python + torch start-up | {start:.1f} |")
    print(f"| ratio to the 120 s target | {run / 120:.2f} ({'PASS' if run <= 120 else 'FAIL'}) |")


if __name__ == "__main__":
    main()
