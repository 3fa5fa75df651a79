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

.PHONY: setup demo test bench samples clean

setup: $(STAMP) samples

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
