# wcetfit — set-up, demo, tests and benchmarks.
#   make setup   idempotent: .venv, editable install (builds the cffi module), samples
#   make demo    set-up, then the main job on the adpcm sample
#   make test    set-up, then the whole test suite
#   make bench   set-up, then the performance and accuracy figures (bench/results.json)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

NATIVE_SRC := $(wildcard instrument/*.c instrument/*.h) instrument/build_native.py

.PHONY: setup demo test bench samples system-tools clean

setup: $(STAMP) samples system-tools

# Optional Debian tools: graphviz lays out the HTML report's CFG (a built-in layout is used
# without it) and chromium renders that report once in a test.  Installed when missing and
# apt-get can run (root, or sudo without a password); otherwise the tests that need them
# say so when they skip.
SYSTEM_PACKAGES := graphviz chromium
system-tools:
	@if command -v dot >/dev/null && command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "note: graphviz/chromium missing and apt-get cannot run here; the tests that need them will skip and say so"; exit 0; fi; \
	if ! command -v apt-get >/dev/null; then echo "note: no apt-get; graphviz/chromium not installed"; exit 0; fi; \
	echo "installing Debian packages: $(SYSTEM_PACKAGES)"; \
	$$SUDO apt-get update -qq >/dev/null && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null \
	|| echo "warning: apt-get could not install $(SYSTEM_PACKAGES); the tests that need them will skip and say so"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip

$(STAMP): $(VENV)/bin/python pyproject.toml setup.py $(NATIVE_SRC)
	$(VENV)/bin/pip install --quiet -e '.[test]'
	$(PY) -c "import wcetfit._native"
	touch $@

samples:
	$(MAKE) --no-print-directory -C samples

demo: setup
	$(VENV)/bin/wcetfit analyze samples/adpcm

test: setup
	$(PY) -m pytest -q -rs tests

bench: setup
	$(PY) -m bench.run

clean:
	$(MAKE) -C samples clean
	rm -rf build *.egg-info wcetfit/_native*.so
