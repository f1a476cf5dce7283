rule summarize:
    """results/summary.csv: one tidy row per run x evaluation point."""
    input:
        # every file of every run: the job reads metrics.csv and run.json and checks them all
        # (fednorm.integrity), so a run file newer than the summary makes it run again
        PLAN.run_files(tuple(PLAN.runs)),
    output:
        PLAN.paths.summary(),
    log:
        f"{RESULTS}/logs/summarize.log",
    conda:
        ENV
    script:
        "../scripts/summarize.py"
