rule train:
    """One training run: metrics.csv and run.json, written atomically."""
    input:
        get_dataset,
    output:
        metrics=f"{RESULTS}/runs/{{run_id}}/metrics.csv",
        meta=f"{RESULTS}/runs/{{run_id}}/run.json",
        norm_error=f"{RESULTS}/runs/{{run_id}}/norm_error.csv",
    params:
        run=get_run_config,
        data_dir=DATA,
        device=EXECUTION.get("device", "auto"),
    threads: EXECUTION.get("threads", 1)
    resources:
        gpu=EXECUTION.get("gpus_per_job", 0),
    log:
        f"{RESULTS}/logs/train/{{run_id}}.log",
    script:
        "../scripts/train.py"
