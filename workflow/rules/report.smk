# The HTML report (snakemake --report report.html; docs/results.md). Every figure, table and the
# claims ledger is flagged with report() where its rule declares it (reported(), common.smk),
# under a category per paper, with a caption of its own: written here, one .rst per file,
# from the config (fednorm.report). A rule rather than files written while the workflow is
# parsed: a caption then changes with the figure it describes (both follow the config), and
# parsing writes nothing.
rule report_captions:
    """The report's captions: results/report/<figure file>.rst."""
    output:
        [entry.caption for entry in REPORT.values()],
    params:
        texts=caption_texts,
    log:
        f"{RESULTS}/logs/report_captions.log",
    conda:
        ENV
    script:
        "../scripts/report_captions.py"
