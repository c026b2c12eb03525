# Two-command quickstart: `make demo` (set up + train on the embedded sample) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test test-fast lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,cluster]'
	# the fused CPU kernel, compiled now (fails only with PP_FUSED_KERNEL=on where it cannot build)
	$(BIN)/python -m protein_performer.attention.kernels --build
	touch $(STAMP)

demo: venv
	$(BIN)/protein-performer train experiment=demo

test: venv
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest -q

# the edit loop: the suite without the tests marked slow (those over ~1.5 s each)
test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow"

lint: venv
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

bench: venv
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,cluster,bench]'
	$(BIN)/python benchmarks/attention_scaling.py --overwrite
	$(BIN)/python benchmarks/approximation.py --overwrite

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
