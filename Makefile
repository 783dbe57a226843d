# The two set-up commands of README.md. Both install into the active Python environment.
PYTHON ?= python3
# CPU machines get the CPU build of torch; a machine that already has torch (a CUDA build) keeps it.
TORCH ?= torch==2.13.0
PORT ?=

.PHONY: install install-dev app test test-fast test-browser zoo

install:
	$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install "$(TORCH)"
	$(PYTHON) -m pip install -e .

# dev: pytest, playwright, peft; test: TRL, for the DiagnosisCallback's test (it fails, never skips, without it)
install-dev: install
	$(PYTHON) -m pip install -e ".[dev,test]"

# Run the bundled example diagnosis (once) and open the app on it at 127.0.0.1 (the port is printed).
# PNG/SVG export uses kaleido (a dependency) with a system Chromium (apt-get install chromium).
app: install
	$(PYTHON) -m app.serve $(if $(PORT),--port $(PORT))

# The whole test suite (CI runs exactly this), browser end-to-end tests included (/usr/bin/chromium;
# screenshots in tests/screenshots/)
test: install-dev
	$(PYTHON) -m pytest -q

# The pure and small tests (maths, config, data, report, verdict, tiny trainer steps): a few minutes
test-fast: install-dev
	$(PYTHON) -m pytest -q -m "not slow"

# Only the browser end-to-end tests (Playwright + Debian's /usr/bin/chromium), about 6 minutes
test-browser: install-dev
	$(PYTHON) -m pytest -q tests/test_e2e_browser.py

# Rebuild the bundled toy models and problem splits (about 17 minutes on 2 CPU cores)
zoo: install
	opsd-diag zoo build --out sample_data/models --problems-dir sample_data/problems --size full --seed 0
