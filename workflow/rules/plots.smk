rule figure:
    """One figure as .pdf, .png and the plotted numbers as .csv."""
    input:
        PLAN.paths.summary(),
    output:
        multiext(f"{FIGURES}/{{figure}}", ".pdf", ".png", ".csv"),
    params:
        figure=get_figure,
        stem=lambda wildcards: f"{FIGURES}/{wildcards.figure}",
    log:
        f"{RESULTS}/logs/figures/{{figure}}.log",
    script:
        "../scripts/figure.py"
