# fednorm-repro. `make test` installs, lints (the code, then the workflow) and runs the tests;
# `make quick` runs the whole pipeline on CPU, offline; `make figures` runs the paper scale
# (CIFAR-10, a GPU).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
CORES ?= 2
SNAKEMAKE := $(PYTHON) -m snakemake
# The configurations whose workflow `make lint-workflow` lints: paper scale and the quick profile
LINT_CONFIGS ?= config/config.yaml config/quick.yaml

.PHONY: install lint lint-workflow test quick figures dry-run bench clean-quick

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

lint:
	$(PYTHON) -m ruff check src tests benchmarks workflow/scripts notebooks

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

test: install lint lint-workflow
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
