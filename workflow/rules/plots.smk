# One job per folder of figures (figures/fbn, figures/fixbn, ...: a paper's figures and tables):
# it draws each of them from the summary, a figure as .pdf, .png and the plotted numbers as
# .csv, a table as .csv and .md. One process per folder, not per figure: drawing a figure takes
# well under a second, starting a Snakemake script about three. Changing a figure's keys in
# the config redraws its folder (the rule's params change).
for folder, names in PLAN.figure_folders().items():

    rule:
        name:
            "figures_" + (re.sub(r"\W", "_", folder) or "top")
        input:
            PLAN.paths.summary(),
        output:
            reported(PLAN.figure_files_of(names)),
        params:
            figures=[PLAN.figures[n] for n in names],
            stems=[f"{FIGURES}/{n}" for n in names],
            runs=RUN_IDS,  # each must have rows in the summary (fednorm.integrity)
        log:
            f"{RESULTS}/logs/figures/{folder or 'top'}.log",
        conda:
            ENV
        script:
            "../scripts/figure.py"
