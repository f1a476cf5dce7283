rule claims:
    """The claims ledger: each paper number beside ours, with a verdict (fednorm.claims)."""
    input:
        summary=PLAN.paths.summary(),
        claims=PLAN.claims,
    output:
        reported(ledger_files(PLAN)),
    params:
        claims=CLAIMS,
        stem=output_stem,  # figures/claims: the outputs' stem
        runs=RUN_IDS,  # each must have rows in the summary (fednorm.integrity)
    log:
        f"{RESULTS}/logs/claims.log",
    conda:
        ENV
    script:
        "../scripts/claims.py"
