rule claims:
    """The claims ledgers: each paper number beside ours, with a verdict (fednorm.claims), and
    each claim in words with a verdict that knows the seed noise (fednorm.claims.words)."""
    input:
        summary=PLAN.paths.summary(),
        claims=PLAN.claims,
    output:
        reported(ledger_files(PLAN)),
    params:
        claims=CLAIMS,
        stem=output_stem,  # figures/claims: the numbers' stem
        words_stem=lambda wildcards, output: os.path.splitext(output[-1])[0],  # claims_words
        runs=RUN_IDS,  # each must have rows in the summary (fednorm.integrity)
    log:
        f"{RESULTS}/logs/claims.log",
    conda:
        ENV
    script:
        "../scripts/claims.py"
