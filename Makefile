# fednorm-repro. `make test` installs, lints (the code, then the workflow) and runs the tests;
# `make quick` runs the whole pipeline on CPU, offline; `make hour` every paper's claims on
# CIFAR-10 in one GPU-hour; `make figures` runs the paper scale (CIFAR-10, a GPU);
# `make gpu-check` proves a lent GPU in one command (docs/speed.md, GPU check).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
CORES ?= 2
SNAKEMAKE := $(PYTHON) -m snakemake
# The configurations whose workflow `make lint-workflow` lints: paper scale, quick and hour
LINT_CONFIGS ?= config/config.yaml config/quick.yaml config/hour.yaml

.PHONY: install lint lint-workflow test quick quick-other-seeds quick-third-seeds hour figures dry-run bench clean-quick gpu-check

# Installs once per Python environment (a stamp under .make/, redone when pyproject.toml
# changes); `make install FORCE=1`, or removing .make/, installs again.
STAMP := .make/installed$(subst /,_,$(shell $(PYTHON) -c 'import sys; print(sys.prefix)'))
install: $(STAMP)
ifdef FORCE
.PHONY: $(STAMP)
endif
$(STAMP): pyproject.toml
	$(PIP) install -q -e ".[dev,quick,notebooks]"
	@mkdir -p .make && touch $@

# ruff, then the import graph's layers (import-linter: [tool.importlinter] in pyproject.toml)
lint:
	$(PYTHON) -m ruff check src tests benchmarks workflow/scripts notebooks
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -c \
	    'from importlinter.cli import lint_imports_command; lint_imports_command()'

# Snakemake's linter, for each of LINT_CONFIGS: any finding fails. Snakemake 9 exits 1 on a
# finding; its report ("Lints for rule ..." or "Lints for snakefile ...") is checked too, for
# versions that exit 0 (`--lint json` prints the same text in 9.27).
lint-workflow:
	@for cfg in $(LINT_CONFIGS); do \
	    echo "snakemake --lint --configfile $$cfg"; \
	    out=$$($(SNAKEMAKE) --lint --configfile $$cfg 2>&1); status=$$?; \
	    if [ $$status -ne 0 ] || printf '%s\n' "$$out" | grep -q '^Lints for'; then \
	        printf '%s\n' "$$out"; echo "lint-workflow: findings for $$cfg (exit $$status)"; \
	        exit 1; \
	    fi; \
	done

# pytest-xdist: a worker per core (tests/conftest.py: one thread each); the tests of the .test
# DAG share one worker (--dist loadgroup, xdist_group "tiny_dag"), so the DAG runs once
TEST_WORKERS ?= $(CORES)
test: install lint lint-workflow
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup

quick: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/quick

hour: install
	$(SNAKEMAKE) --profile workflow/profiles/hour

# The quick profile again on disjoint seeds (config/quick_other_seeds.yaml), then its claims
# ledger against make quick's: each verdict that moved or flipped, and the counts; exit 1 when a
# claim flips between holds and contradicted (docs/claims.md, Verdicts across seeds)
quick-other-seeds: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/quick \
	    --configfile config/quick.yaml config/quick_other_seeds.yaml
	$(PYTHON) -m fednorm.cli across-seeds figures/quick/claims_words.csv \
	    figures/quick_other_seeds/claims_words.csv

# A third disjoint seed set (config/quick_third_seeds.yaml, seeds 4, 5), then the share of
# claims that keep their verdict over the three pairs of seed sets and over the 27 pairs of
# two-seed sets that the six seeds give (after make quick and make quick-other-seeds;
# benchmarks/verdict_stability.py, docs/claims.md)
quick-third-seeds: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/quick \
	    --configfile config/quick.yaml config/quick_third_seeds.yaml
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) benchmarks/verdict_stability.py \
	    results/quick results/quick_other_seeds results/quick_third_seeds --regroup 2

figures: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/default

dry-run:
	$(SNAKEMAKE) --dry-run --quiet rules

bench: install
	$(PYTHON) benchmarks/bench_engine.py

clean-quick:
	rm -rf results/quick figures/quick results/quick_other_seeds figures/quick_other_seeds \
	    results/quick_third_seeds figures/quick_third_seeds

# The GPU proven in one command, at most 8 minutes on one H100: CUDA tests, images/s at the
# papers' shapes beside a plain PyTorch loop, GPU-hours per paper part, into $(OUT)/report.md
# and report.json (docs/speed.md, GPU check). Needs PyTorch, PyYAML and pytest only (no
# install, no Snakemake, no network). `make gpu-check DEVICE=cpu SMOKE=1 OUT=dir`: the same
# steps at tiny sizes on a CPU. The check starts no step after 450 s; timeout kills it at
# GPU_CHECK_TIMEOUT s, its report written up to the step it was in.
DEVICE ?= cuda
OUT ?= results/gpu-check
GPU_CHECK_TIMEOUT ?= 540
gpu-check:
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} timeout $(GPU_CHECK_TIMEOUT) $(PYTHON) -m \
	    fednorm.gpucheck --device $(DEVICE) --out $(OUT) $(if $(SMOKE),--smoke)
