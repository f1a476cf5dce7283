"""The check's steps: each timed, its failure recorded with its traceback, none stopping the
others; the report (Markdown) and its numbers (JSON) rewritten after every step, so that a
check killed by its time limit leaves what it had measured."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fednorm.io import write_json, write_text

# A step's result: {"summary": one line, "tables": {title: list of row dicts}, any numbers}
Result = dict[str, Any]


@dataclass
class Step:
    name: str
    status: str = "pending"  # ok, failed, skipped (out of time, or not applicable)
    seconds: float = 0.0
    result: Result = field(default_factory=dict)
    error: str = ""  # the traceback of a failed step


@dataclass
class Check:
    """Runs steps in order within ``budget_s`` seconds from its creation: a step that would
    start after it is recorded ``skipped``. ``out``: the folder of report.md and report.json."""

    out: Path
    title: str
    budget_s: float
    context: dict[str, Any] = field(default_factory=dict)  # shown at the top of the report
    steps: list[Step] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)

    def run(self, name: str, work: Callable[[], Result]) -> Step:
        step = Step(name)
        self.steps.append(step)
        if time.perf_counter() - self.start > self.budget_s:
            step.status, step.result = "skipped", {
                "summary": f"not started: the check's {self.budget_s:.0f} s were spent"}
        else:
            began = time.perf_counter()
            try:
                step.result, step.status = work(), "ok"
            except Exception:  # recorded; the other steps go on
                step.status, step.error = "failed", traceback.format_exc()
            step.seconds = time.perf_counter() - began
        self.write()
        return step

    def skip(self, name: str, why: str) -> Step:
        """A step recorded ``skipped`` without running, with the reason as its summary."""
        step = Step(name, status="skipped", result={"summary": why})
        self.steps.append(step)
        self.write()
        return step

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        total = time.perf_counter() - self.start
        write_json(self.out / "report.json", {
            "title": self.title, "context": self.context, "seconds": total,
            "steps": [asdict(s) for s in self.steps]})
        write_text(self.out / "report.md", markdown(self.title, self.context, self.steps, total))


def markdown(title: str, context: Mapping[str, Any], steps: list[Step], total: float) -> str:
    lines = [f"# {title}", ""]
    lines += [f"- {key}: {value}" for key, value in context.items()]
    lines += ["", f"{len(steps)} steps in {total:.1f} s: "
              + ", ".join(f"{sum(s.status == k for s in steps)} {k}"
                          for k in ("ok", "failed", "skipped")), ""]
    lines += ["| step | status | seconds | summary |", "|---|---|---:|---|"]
    lines += [f"| {s.name} | {s.status} | {s.seconds:.1f} | {s.result.get('summary', '')} |"
              for s in steps]
    for s in steps:
        lines += ["", f"## {s.name}: {s.status} ({s.seconds:.1f} s)", ""]
        if s.result.get("summary"):
            lines += [s.result["summary"], ""]
        for caption, rows in s.result.get("tables", {}).items():
            lines += [f"**{caption}**", "", *table(rows), ""]
        if s.result.get("text"):
            lines += ["```", s.result["text"].rstrip(), "```", ""]
        if s.error:
            lines += ["```", s.error.rstrip(), "```", ""]
    return "\n".join(lines) + "\n"


def table(rows: list[Mapping[str, Any]]) -> list[str]:
    """A Markdown table of ``rows`` (dicts, the first one's keys as columns); numbers
    right-aligned, floats to 3 significant digits (or thousands separators past 1,000)."""
    if not rows:
        return ["(none)"]
    keys = list(rows[0])
    numeric = [all(isinstance(r.get(k), int | float) or r.get(k) is None for r in rows)
               for k in keys]
    out = ["| " + " | ".join(keys) + " |",
           "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    out += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in rows]
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"
