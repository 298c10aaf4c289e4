# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_RUN := runs/demo
DEMO_OUT := demo-out

.PHONY: demo test lint typecheck-links gpu-check install clean

install: $(STAMP)

# Re-install only when the package's metadata changes; the install is
# editable, so code changes need none.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO_RUN)
	$(BIN)/srgan train --config demo --set train.run_dir=$(DEMO_RUN)
	$(BIN)/srgan samples $(DEMO_OUT)/photos --force > /dev/null
	$(BIN)/srgan upscale $(DEMO_OUT)/photos/train/chelsea.png --checkpoint $(DEMO_RUN) --output $(DEMO_OUT) --force
	$(BIN)/srgan compare $(DEMO_RUN) $(DEMO_OUT)/photos/val/immunohistochemistry.png --output $(DEMO_OUT)/comparison.png --force
	@echo "look at: $(abspath $(DEMO_OUT)/comparison.png)  (bicubic | SR | original)"

test: lint
	$(BIN)/python -m pytest -q -n 2 --durations=10  # a worker a core: see tests/conftest.py

# Linter, formatter and type checker (settings in pyproject.toml); `make test` runs it first.
lint: $(STAMP) typecheck-links
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# mypy cannot follow setuptools' editable finder (folder cli/ is srgan.cli): it
# reads the package through .typecheck/srgan/, one link per folder, laid afresh
# from [tool.setuptools.package-dir] so that a package added there is checked too.
typecheck-links:
	rm -rf .typecheck
	mkdir -p .typecheck/srgan
	sed -n 's/^"srgan\.\([a-z_]*\)" = "\([a-z_]*\)"$$/\1 \2/p' pyproject.toml | \
		while read name folder; do ln -s ../../$$folder .typecheck/srgan/$$name; done

# The first thing to run on a machine with a GPU (under 8 minutes on one):
# CUDA tests, train + resume, upscale, benchmarks, torchrun with NCCL.
gpu-check: $(STAMP)
	$(BIN)/python tools/gpu_check.py

clean:
	rm -rf $(DEMO_RUN) $(DEMO_OUT) .pytest_cache .typecheck .mypy_cache .ruff_cache
