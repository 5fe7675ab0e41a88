# epcap: two commands on a fresh machine -- `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.epcap-installed
PYTEST := $(PY) -m pytest

.PHONY: run test test-fast count bench mutation lint clean venv cluster gpu-check

venv: $(STAMP)

# torch is pinned and installed before the package: a bare `torch` pulls a multi-GB CUDA build.
# The [megatron] extra (megatron-core) is installed with torch held to that pin (a constraint),
# so it never swaps in a CUDA torch.
$(STAMP): pyproject.toml setup.py harness/telemetry/_scan.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	@echo "torch==2.13.0" > $(VENV)/torch-constraint.txt
	$(PY) -m pip install -q -c $(VENV)/torch-constraint.txt -e '.[dev,megatron]'
	@touch $(STAMP)

# A cluster login node (docs/slurm.md): epcap with the [cluster] extra (nvidia-ml-py for the
# node-side GPU probe, megatron-core, NVSHMEM) in $(VENV), torch as the site's index serves it.
# The node-side probe runs this same Python; without nvidia-ml-py it falls back to nvidia-smi.
cluster:
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[cluster]'
	$(VENV)/bin/epcap doctor

run: $(STAMP)
	$(VENV)/bin/epcap run

# Two pytest-xdist workers: most tests are one Python process, so one of CI's two cores sat
# idle (measured: the cores were 37% busy through the unit and reliability tests run one at a
# time). tests/conftest.py keeps a module's tests on one worker (its fixtures made once) and
# the end-to-end modules, in order, on one (real campaigns, the one CI Slurm node).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist loadscope

test: $(STAMP)
	$(PYTEST) -q $(XDIST)

test-fast: $(STAMP)
	$(PYTEST) -q $(XDIST) -m "not slow and not slurm"

# How many tests `make test` runs and how many of them `make test-fast` skips, as pytest
# collects them now (the README writes no count: a written one goes stale with every test).
count: $(STAMP)
	@$(PYTEST) --collect-only -q | tail -n 1
	@$(PYTEST) --collect-only -q -m "slow or slurm" | tail -n 1

# Every benchmark runs even when an earlier one misses its target; the exit status says if any did.
bench: $(STAMP)
	@missed=""; for f in tests/benchmarks/bench_*.py; do echo "== $$f"; \
	  $(PY) $$f || missed="$$missed $$f"; done; \
	if [ -n "$$missed" ]; then echo "bench: target missed or failed:$$missed"; exit 1; fi

# The first GPU machine's checks (scripts/gpu_check.py, under 10 minutes on one GPU): the
# reference backend on NCCL, CUDA events against perf_counter, the doctor's NVML probe, the
# memory model against torch.cuda.max_memory_allocated. Without a GPU: one line, exit 2.
gpu-check: $(STAMP)
	$(PY) scripts/gpu_check.py

mutation: $(STAMP)
	$(PY) scripts/mutation.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf mutants .mutmut-cache .pytest_cache .hypothesis
