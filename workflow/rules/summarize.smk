# The summary: one tidy row per run x evaluation point (fednorm.summarize). With a second stage
# of the claims (config `stage2`, fednorm.claims.stage2), the first stage's runs are summarized
# first; a checkpoint extends each tuning grid one value beyond a choice at its edge
# (fednorm.claims.extension) and jobs train those on the tuning seeds; the tuned summary holds
# both; a second checkpoint names the runs that the design fixes (the tuned methods' fresh
# seeds), jobs train them, and the summary holds every run (summary_inputs, common.smk).
rule summarize:
    """results/summary.csv: one tidy row per run x evaluation point."""
    input:
        # every file of every run: the job reads metrics.csv and run.json and checks them all
        # (fednorm.integrity), so a run file newer than the summary makes it run again
        unpack(summary_inputs),
    output:
        PLAN.paths.summary(),
    log:
        f"{RESULTS}/logs/summarize.log",
    conda:
        ENV
    script:
        "../scripts/summarize.py"


if PLAN.stage2:

    rule summarize_first:
        """The first stage's runs alone: what the claims' checkpoint reads."""
        input:
            runs=PLAN.run_files(tuple(PLAN.runs)),
        output:
            PLAN.paths.first_summary(),
        log:
            f"{RESULTS}/logs/summarize_first.log",
        conda:
            ENV
        script:
            "../scripts/summarize.py"

    checkpoint tuning_extension:
        """Each of the claims' tuning grids one value beyond a choice at its edge, on the tuning
        seeds (fednorm.claims.extension): once, before the fresh seeds are chosen."""
        input:
            summary=PLAN.paths.first_summary(),
            claims=PLAN.claims,
        output:
            PLAN.paths.extension_plan(),
        params:
            claims=CLAIMS,
        log:
            f"{RESULTS}/logs/tuning_extension.log",
        conda:
            ENV
        script:
            "../scripts/extension_plan.py"

    rule train_extension:
        """One training job of the tuning extension: its bundles (fednorm.run)."""
        input:
            bundle_dataset(RUN_IDS),
            plan=PLAN.paths.extension_plan(),
        output:
            PLAN.paths.extension_job("{job}"),
        params:
            data_dir=data_dir,
            device=EXECUTION.device,
            checkpoint_minutes=EXECUTION.checkpoint_minutes,
            together=EXECUTION.together,
            data_workers=EXECUTION.data_workers,
            execution=EXECUTION.job_keys,  # precision, cuda_graph, jobs_per_gpu
        threads: EXECUTION.threads
        resources:
            gpu=EXECUTION.gpus_per_job,
            cpus_per_gpu=EXECUTION.cpus_per_gpu,
            mem_mb=EXECUTION.mem_mb,
            runtime=EXECUTION.runtime,
        log:
            f"{RESULTS}/logs/extension/train_{{job}}.log",
        conda:
            ENV
        script:
            "../scripts/train_stage2.py"

    rule summarize_tuned:
        """The first stage's runs and the extension's: what the second stage's checkpoint
        reads."""
        input:
            unpack(tuned_summary_inputs),
        output:
            PLAN.paths.tuned_summary(),
        log:
            f"{RESULTS}/logs/summarize_tuned.log",
        conda:
            ENV
        script:
            "../scripts/summarize.py"

    checkpoint stage2_plan:
        """The runs the design fixes but the first stage names: each claim's sides at their
        tuned values on the fresh seeds (fednorm.claims.stage2); no verdict is read, no seed
        bought, no run at another budget."""
        input:
            summary=PLAN.paths.tuned_summary(),
            extension=PLAN.paths.extension_plan(),
            claims=PLAN.claims,
        output:
            PLAN.paths.stage2_plan(),
        params:
            claims=CLAIMS,
        log:
            f"{RESULTS}/logs/stage2_plan.log",
        conda:
            ENV
        script:
            "../scripts/stage2_plan.py"

    rule train_stage2:
        """One training job of the second stage: its bundles, as the plan's (fednorm.run)."""
        input:
            bundle_dataset(RUN_IDS),
            plan=PLAN.paths.stage2_plan(),
        output:
            PLAN.paths.stage2_job("{job}"),
        params:
            data_dir=data_dir,
            device=EXECUTION.device,
            checkpoint_minutes=EXECUTION.checkpoint_minutes,
            together=EXECUTION.together,
            data_workers=EXECUTION.data_workers,
            execution=EXECUTION.job_keys,  # precision, cuda_graph, jobs_per_gpu
        threads: EXECUTION.threads
        resources:
            gpu=EXECUTION.gpus_per_job,
            cpus_per_gpu=EXECUTION.cpus_per_gpu,
            mem_mb=EXECUTION.mem_mb,
            runtime=EXECUTION.runtime,
        log:
            f"{RESULTS}/logs/stage2/train_{{job}}.log",
        conda:
            ENV
        script:
            "../scripts/train_stage2.py"
