rule toy:
    """The FBN paper's 2-D normalization toy (Figs 1a, 1b, 2a, 2b, 2c): no training data, seconds."""
    output:
        reported(PLAN.toy_files()),
    params:
        toy=PLAN.toy,
        folder=output_folder,  # figures/<toy.figures>: the outputs' folder
    log:
        f"{RESULTS}/logs/toy.log",
    conda:
        ENV
    script:
        "../scripts/toy.py"
