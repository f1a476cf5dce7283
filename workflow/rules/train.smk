# One job per bundle of runs that train together (fednorm.plan.bundles: from the config alone,
# at most execution.bundle_size runs). A job's outputs are the files of its members that are
# not complete yet (PLAN.pending_bundles), so Snakemake never deletes, marks incomplete or
# retrains a finished run; a bundle whose members are all complete gets no rule.
for bundle_id, run_ids in PLAN.pending_bundles().items():

    rule:
        name:
            bundle_rule_name(bundle_id)
        input:
            bundle_dataset(run_ids),
        output:
            PLAN.run_files(run_ids),
        params:
            bundle_id=bundle_id,
            runs=[PLAN.runs[r].identity() for r in run_ids],
            out_dirs=[PLAN.paths.run_dir(r) for r in run_ids],
            data_dir=data_dir,
            device=EXECUTION.device,
        threads: EXECUTION.threads
        # gpu: 1 -> sbatch --gpus=1 under workflow/profiles/slurm; the rest only matter there
        resources:
            gpu=EXECUTION.gpus_per_job,
            cpus_per_gpu=EXECUTION.cpus_per_gpu,
            mem_mb=EXECUTION.mem_mb,
            runtime=EXECUTION.runtime,
        log:
            f"{RESULTS}/logs/train/{bundle_id}.log",
        conda:
            ENV
        script:
            "../scripts/train_bundle.py"
