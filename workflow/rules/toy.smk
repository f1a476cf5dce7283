rule toy:
    """The FBN paper's 2-D normalization toy (Figs 1a, 1b, 2a, 2b, 2c): no training data, seconds."""
    output:
        PLAN.toy_files(),
    params:
        toy=PLAN.toy,
        folder=f"{FIGURES}/{PLAN.toy.folder}" if PLAN.toy else "",
    log:
        f"{RESULTS}/logs/toy.log",
    script:
        "../scripts/toy.py"
