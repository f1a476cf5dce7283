# fednorm-repro. `make test` installs, lints (the code, then the workflow) and runs the tests;
# `make quick` is a bare `snakemake --cores 2`: the whole pipeline on CPU, offline; `make
# cifar10` every paper's claims on CIFAR-10, one GPU (workflow/profiles/cifar10: `fednorm plan
# config/config.yaml config/hour.yaml` prices it); `make figures` the paper scale
# (workflow/profiles/paper: `fednorm plan config/config.yaml`). Both check their data and GPU
# before any job starts. On a GPU machine without network, `bash benchmarks/gpu/run.sh OUT`
# measures the GPU and runs the quick DAG on it at 8 seeds (docs/speed.md, GPU check).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
CORES ?= 2
SNAKEMAKE := $(PYTHON) -m snakemake
# The configurations whose workflow `make lint-workflow` lints: paper scale, quick and CIFAR-10
LINT_CONFIGS ?= config/config.yaml config/quick.yaml config/hour.yaml

.PHONY: install lint lint-workflow test quick quick-other-seeds quick-third-seeds cifar10 figures docs-numbers dry-run bench clean-quick gpu-check \
	wheelhouse gpu-quick

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

# The quick profile: what a bare `snakemake` runs (its config file, config/quick.yaml, is the
# Snakefile's default; profiles/default adds keep-going and the resume settings)
quick: install
	$(SNAKEMAKE) --cores $(CORES)

cifar10: install
	$(SNAKEMAKE) --profile workflow/profiles/cifar10

# The numbers README.md and docs/ state, rewritten in their marked blocks (<!-- generated: NAME
# -->): each profile's runs, jobs and price from `fednorm plan`, and after `make quick` its
# verdict counts, quoted accuracies and run-minutes from figures/quick and results/quick
docs-numbers:
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m fednorm.cli docs-numbers

# The quick profile again on disjoint seeds (config/quick_other_seeds.yaml), then its claims
# ledger against make quick's: each verdict that moved or flipped, and the counts; exit 1 when a
# claim flips between holds and contradicted (docs/claims.md, Verdicts across seeds)
quick-other-seeds: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/quick \
	    --configfile config/quick.yaml config/quick_other_seeds.yaml
	$(PYTHON) -m fednorm.cli across-seeds figures/quick/claims_words.csv \
	    figures/quick_other_seeds/claims_words.csv

# A third disjoint seed set (config/quick_third_seeds.yaml, every seed moved by 16), then the share of
# claims that keep their verdict over the three pairs of seed sets and over the 27 pairs of
# two-seed sets that the six seeds give (after make quick and make quick-other-seeds;
# benchmarks/verdict_stability.py, docs/claims.md)
quick-third-seeds: install
	$(SNAKEMAKE) --cores $(CORES) --profile workflow/profiles/quick \
	    --configfile config/quick.yaml config/quick_third_seeds.yaml
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) benchmarks/verdict_stability.py \
	    results/quick results/quick_other_seeds results/quick_third_seeds --regroup 2

figures: install
	$(SNAKEMAKE) --profile workflow/profiles/paper

dry-run:
	$(SNAKEMAKE) --profile workflow/profiles/paper --dry-run --quiet rules

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

# The wheels that `make gpu-quick` installs on a GPU machine without network or Snakemake
# (pip install --no-index --find-links): Snakemake with its dependencies, and mlxtend without
# its own (NumPy, SciPy, pandas, scikit-learn, Matplotlib: there already), for CPython 3.11 and
# 3.12 on linux x86_64, into one folder (pure-Python wheels once). Needs PyPI; a dependency
# published only as a source archive (WHEELHOUSE_SDISTS) is built into a wheel here first.
# The folder is ignored by git: carry it with the tree (about 35 MB).
WHEELHOUSE ?= .wheelhouse
WHEELHOUSE_PYTHONS ?= 3.11 3.12
WHEELHOUSE_SNAKEMAKE ?= snakemake==9.27.1
WHEELHOUSE_MLXTEND ?= mlxtend==0.25.0
WHEELHOUSE_SDISTS ?= connection_pool==0.0.3
WHEELHOUSE_FOR = --only-binary=:all: --implementation cp $(foreach p,manylinux_2_28_x86_64 \
    manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_12_x86_64 manylinux2010_x86_64 \
    manylinux_2_5_x86_64 manylinux1_x86_64,--platform $(p))
wheelhouse:
	$(PIP) wheel -q --no-deps --wheel-dir $(WHEELHOUSE) $(WHEELHOUSE_SDISTS)
	for py in $(WHEELHOUSE_PYTHONS); do \
	    $(PIP) download -q --dest $(WHEELHOUSE) --find-links $(WHEELHOUSE) --python-version $$py \
	        $(WHEELHOUSE_FOR) $(WHEELHOUSE_SNAKEMAKE) || exit 1; \
	    $(PIP) download -q --no-deps --dest $(WHEELHOUSE) --python-version $$py \
	        $(WHEELHOUSE_FOR) $(WHEELHOUSE_MLXTEND) || exit 1; \
	done
	@du -sh $(WHEELHOUSE)

# The quick DAG on a GPU at 8 seeds and what it rests on (fednorm.gpucheck.quick) in the
# current Python: images/s at 1, 16 and 64 runs a bundle with the CUDA graph and without (and
# whether the two end bit for bit equal) and under each precision, 1, 2 and 4 jobs on the GPU,
# then the quick DAG (workflow/profiles/gpu-quick). On a GPU machine prefer
# `bash benchmarks/gpu/run.sh OUT` (preflight, its own environment, everything under OUT).
# `make gpu-quick DEVICE=cpu SMOKE=1 QUICK_OUT=dir QUICK_SUMMARY=file`: the same steps at tiny
# sizes on a CPU (tests/test_gpucheck_quick.py).
QUICK_OUT ?= results/gpu-quick
QUICK_SUMMARY ?= $(QUICK_OUT)/summary.json
GPU_QUICK_TIMEOUT ?= 560
gpu-quick:
	PYTHONPATH=src$${PYTHONPATH:+:$$PYTHONPATH} timeout $(GPU_QUICK_TIMEOUT) $(PYTHON) -m \
	    fednorm.gpucheck.quick --device $(DEVICE) --out $(QUICK_OUT) --summary $(QUICK_SUMMARY) \
	    --wheelhouse $(WHEELHOUSE) $(if $(SMOKE),--smoke)
