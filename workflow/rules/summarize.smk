rule summarize:
    """results/summary.csv: one tidy row per run x evaluation point."""
    input:
        PLAN.metrics_files(),
    output:
        PLAN.paths.summary(),
    log:
        f"{RESULTS}/logs/summarize.log",
    conda:
        ENV
    script:
        "../scripts/summarize.py"
