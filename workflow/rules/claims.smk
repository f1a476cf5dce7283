rule claims:
    """The claims ledgers: each paper number beside ours, with a verdict (fednorm.claims), and
    each claim in words with a verdict that is a test of stated error rate
    (fednorm.claims.verdicts), judged once at alpha on every run of the design
    (fednorm.claims.words_ledger), its calibration by a parametric bootstrap of the whole ledger
    (fednorm.claims.calibration) and its pre-registration: hashes of the claims file, of the
    deciding modules and of the design (fednorm.claims.prereg)."""
    input:
        unpack(claims_inputs),
    output:
        reported(ledger_files(PLAN)),
        calibration=calibration_file(PLAN)[0],
        prereg=prereg_file(PLAN)[0],
    params:
        claims=CLAIMS,
        stem=output_stem,  # figures/claims: the numbers' stem
        words_stem=lambda wildcards, output: os.path.splitext(output[-3])[0],  # claims_words
        runs=RUN_IDS,  # each must have rows in the summary (fednorm.integrity)
    log:
        f"{RESULTS}/logs/claims.log",
    # the longest job after the summary: first, so that the figures fill the other cores
    priority: 50
    conda:
        ENV
    script:
        "../scripts/claims.py"
