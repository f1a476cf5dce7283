# fednorm-repro. `make test` installs, lints and runs the tests; `make quick` runs the whole
# pipeline on CPU, offline; `make figures` runs the paper scale (CIFAR-10, a GPU).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
CORES ?= 2
SNAKEMAKE := $(PYTHON) -m snakemake

.PHONY: install lint test quick figures dry-run bench clean-quick

install:
	$(PIP) install -q -e ".[dev]"

lint:
	$(PYTHON) -m ruff check src tests benchmarks workflow/scripts

test: install lint
	$(PYTHON) -m pytest

quick: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/quick

figures: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/default

dry-run:
	$(SNAKEMAKE) --dry-run --quiet rules

bench: install
	$(PYTHON) benchmarks/bench_engine.py

clean-quick:
	rm -rf results/quick figures/quick
