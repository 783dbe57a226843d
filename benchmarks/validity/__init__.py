"""The predictive-validity study of issue 11: does the diagnosis predict what training then does?

plan.yaml (the pre-registered plan) -> run_study.py (diagnoses, training runs, evaluations) ->
report.py (RESULTS.md and the predicted-vs-realised scatter).  Product files are read only through
runs_io.py.
"""
