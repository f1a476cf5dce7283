# One job per group of bundles (fednorm.plan.training_jobs: execution.bundles_per_job bundles,
# trained one after the other in one process; one bundle a job by default). A bundle is runs
# that train together (fednorm.plan.bundles: from the config alone, at most
# execution.bundle_size runs). A job's outputs are the files of its runs that are not complete
# yet (PLAN.pending_jobs), so Snakemake never deletes, marks incomplete or retrains a finished
# run; a job whose runs are all complete gets no rule. A bundle's resume point
# (<results>/resume/<bundle id>.pt, fednorm.fl.resume) is no output: a failed job's is kept, and
# the job run again continues from it ("resumed at step N of M" in its log).
for job_id, pending in PLAN.pending_jobs().items():
    run_ids = tuple(r for members in pending.values() for r in members)

    rule:
        name:
            bundle_rule_name(job_id)
        input:
            bundle_dataset(run_ids),
        output:
            PLAN.run_files(run_ids),
        params:
            bundles=[{"bundle_id": bundle_id,
                      "runs": [PLAN.runs[r].identity() for r in members],
                      "out_dirs": [PLAN.paths.run_dir(r) for r in members],
                      "resume": PLAN.paths.resume_point(bundle_id)}
                     for bundle_id, members in pending.items()],
            data_dir=data_dir,
            device=EXECUTION.device,
            checkpoint_minutes=EXECUTION.checkpoint_minutes,
            together=EXECUTION.together,  # bundle_size auto: as many as the memory holds
            data_workers=EXECUTION.data_workers,  # ImageNet-1K's decoding processes
            execution=EXECUTION.job_keys,  # precision, cuda_graph, jobs_per_gpu
        threads: EXECUTION.threads
        # the biggest jobs first, so that none starts last and runs alone (images to train)
        priority: job_priority(run_ids)
        # gpu: 1 -> sbatch --gpus=1 under workflow/profiles/slurm; the rest only matter there
        resources:
            gpu=EXECUTION.gpus_per_job,
            cpus_per_gpu=EXECUTION.cpus_per_gpu,
            mem_mb=EXECUTION.mem_mb,
            runtime=PLAN.job_runtime(run_ids),  # execution.images_per_second, max_runtime
        log:
            f"{RESULTS}/logs/train/{job_id}.log",
        conda:
            ENV
        script:
            "../scripts/train_job.py"
