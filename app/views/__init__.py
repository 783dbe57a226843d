"""The app's pages, run by path through st.navigation (not a legacy pages/ folder); a package so wheels ship them."""
