rule claims:
    """The claims ledger: each paper number beside ours, with a verdict (fednorm.claims)."""
    input:
        summary=PLAN.paths.summary(),
        claims=PLAN.claims,
    output:
        ledger_files(PLAN),
    params:
        claims=CLAIMS,
        stem=f"{FIGURES}/{CLAIMS_NAME}",
    log:
        f"{RESULTS}/logs/claims.log",
    script:
        "../scripts/claims.py"
