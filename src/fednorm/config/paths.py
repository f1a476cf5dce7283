"""Where a pipeline's outputs go."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paths:
    """Where outputs go; derived from the top-level ``paths`` section, never from results."""

    results: str = "results"
    figures: str = "figures"
    data: str = "data"

    def run_dir(self, run_id: str) -> str:
        return f"{self.results}/runs/{run_id}"

    def resume_point(self, bundle_id: str) -> str:
        """A bundle's resume point (fednorm.fl.resume): no job's output, so Snakemake never
        deletes it when it clears or retries a failed job; the finished bundle deletes it."""
        return f"{self.results}/resume/{bundle_id}.pt"

    def summary(self) -> str:
        return f"{self.results}/summary.csv"

    def first_summary(self) -> str:
        """The first stage's runs alone, which the claims' second stage reads
        (fednorm.claims.stage2); with no second stage, the summary is the first stage's."""
        return f"{self.results}/stage2/summary_first.csv"

    def extension_plan(self) -> str:
        """The tuning grids' runs one value beyond an edge, and why (a Snakemake checkpoint's
        output, before the second stage's: fednorm.claims.extension)."""
        return f"{self.results}/stage2/extension.json"

    def extension_job(self, job_id: str) -> str:
        """The record of one training job of the extension: the runs it trained."""
        return f"{self.results}/stage2/extension_jobs/{job_id}.json"

    def tuned_summary(self) -> str:
        """The first stage's runs and the extension's: what the second stage's checkpoint
        reads."""
        return f"{self.results}/stage2/summary_tuned.csv"

    def stage2_plan(self) -> str:
        """The second stage's runs and why each was added (a Snakemake checkpoint's output)."""
        return f"{self.results}/stage2/plan.json"

    def stage2_job(self, job_id: str) -> str:
        """The record of one training job of the second stage: the runs it trained."""
        return f"{self.results}/stage2/jobs/{job_id}.json"

    def figure(self, name: str, ext: str) -> str:
        return f"{self.figures}/{name}.{ext}"
