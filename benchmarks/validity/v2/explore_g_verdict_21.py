"""explore_g_verdict.py's grid rerun on the twenty-one worlds seen after the ninth look (an exploration: it chose
nothing, and no look was built on it). The ninth look's rule (hurts at G <= -0.2 full-distribution / -0.4
sampled-token, helps at G > 0.1 full-distribution) was right on 0.845 of its calls on the nine worlds it was judged on;
this asks whether any rule of the same grid meets the issue's precisions on all twenty-one with room to spare.

    python benchmarks/validity/v2/explore_g_verdict_21.py > benchmarks/validity/v2/explore_g_verdict_21.txt
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.validity.v2.explore_ceiling import WORLDS  # noqa: E402
from benchmarks.validity.v2.explore_g_verdict import main  # noqa: E402

if __name__ == "__main__":
    main(WORLDS, shown=20)
