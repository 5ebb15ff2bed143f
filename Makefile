# Two entry points (see README): `make run` and `make test`. Each creates .venv when missing.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.etriage-installed

.PHONY: install run test test-slow bench clean

$(STAMP): pyproject.toml scripts/system-deps.sh tasks/qnn/sdk.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	bash scripts/system-deps.sh
	# QNN's x86 HTP libraries from PyPI's pinned onnxruntime-qnn wheel into $(VENV)/qnn-sdk (docs/QNN.md).
	# Not provisioned: the qnn-htp-sim target reports itself unavailable, an environment verdict.
	$(PY) -m tasks.qnn provision || echo "make install: QNN not provisioned; qnn-htp-sim will be unavailable" >&2
	touch $(STAMP)

install: $(STAMP)

# The main job: the bot as a service on this machine (embedded Redis + SQLite), a signed
# pull_request webhook replayed into it, and the resulting PR comment printed.
run: install
	$(VENV)/bin/etriage demo

# The whole test suite (real torch/executorch, real Redis + Celery worker, real HTTP), one
# pytest-xdist worker per core (at most 4), a module per worker at a time (tests/conftest.py).
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadscope
test: install
	$(VENV)/bin/python -m pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

# Long runs (fuzzing, load) are behind a flag; a short version of each is always on.
test-slow: install
	$(VENV)/bin/python -m pytest --run-slow $(PYTEST_WORKERS) $(PYTEST_ARGS)

bench: install
	$(VENV)/bin/python bench/classify.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
