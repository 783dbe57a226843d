"""OPSD-Diag app entry: ``streamlit run app/main.py -- --run runs/quickstart`` (or ``python -m app.serve``).

Without ``--run`` the sidebar lists the run directories under ``runs/``.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run` puts app/ on the path, not the repository root
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app import common  # noqa: E402
from opsd_diag.errors import OpsdError  # noqa: E402

st.set_page_config(page_title="OPSD-Diag", layout="wide")
common.init_state(sys.argv[1:])
common.sidebar_run_picker()
pages = {
    "This run": [
        st.Page("views/overview.py", title="Overview", default=True),
        st.Page("views/tokens.py", title="Tokens"),
        st.Page("views/signals.py", title="Signals"),
        st.Page("views/evidence.py", title="Evidence"),
        st.Page("views/export.py", title="Export"),
    ],
    "Workbench": [
        st.Page("views/new_run.py", title="New diagnosis"),
        st.Page("views/train.py", title="Train"),
        st.Page("views/compare.py", title="Compare"),
        st.Page("views/track_record.py", title="Track record"),
        st.Page("views/trajectory.py", title="Trajectory"),
    ],
}
try:
    st.navigation(pages).run()
except OpsdError as e:  # a corrupt or unreadable run (a table read by a page): the message in place
    st.error(common.plain(str(e)))
except (OSError, ValueError, RuntimeError) as e:  # a typed path the system refuses; anything else is a bug
    if common.path_problem(e) is None:
        raise
    st.error(common.path_problem(e))
