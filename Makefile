# `make demo` and `make test` work on a fresh machine with only Python 3.11+:
# each creates .venv when missing and installs the core, every pack (editable, with test extras) and
# frame-distributed with its MPI extra (mpi4py and the MPICH wheel, whose mpiexec the tests run).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PACKS  := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))
EXAMPLE_PACKS := $(sort $(dir $(wildcard examples/*/pyproject.toml)))
DISTRIBUTED := distributed
STAMP  := $(VENV)/.installed
INSTALL_INPUTS := pyproject.toml $(wildcard plugins/*/pyproject.toml) $(wildcard examples/*/pyproject.toml) \
                  $(DISTRIBUTED)/pyproject.toml

.PHONY: setup demo test docs bench clean dist

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(PY) $(INSTALL_INPUTS)
	$(PIP) install --quiet -e '.[test]' $(foreach p,$(PACKS),-e '$(p:%/=%)[test]') $(foreach p,$(EXAMPLE_PACKS),-e '$(p:%/=%)') \
		-e '$(DISTRIBUTED)[mpi,test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/frame ops list
	$(VENV)/bin/frame audit gradients
	$(PY) examples/train_mlp.py
	$(PY) examples/train_rnn.py

test: setup
	$(PY) -m pytest -q

docs: setup
	$(PIP) install --quiet -e '.[docs]'
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

bench: setup
	$(PY) benchmarks/run_all.py

# wheels of every distribution (core, plugins/*, distributed, examples/*) into dist/, built offline with the
# venv's hatchling; docs/getting-started.md says how to install from them
dist: setup
	$(PY) tools/build_wheels.py dist

clean:
	rm -rf $(VENV) docs/_build .pytest_cache dist
