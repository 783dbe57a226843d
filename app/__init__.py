"""Streamlit UI of OPSD-Diag: thin pages over opsd_diag (``streamlit run app/main.py -- --run DIR``)."""
