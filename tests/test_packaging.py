"""What a fresh clone installs and cites: environment.yml holds every package that
pyproject.toml's dependencies and its dev and notebooks extras name; LICENSE and CITATION.cff
are there, the citation naming the three papers the pipeline reproduces."""

import re
import tomllib

import yaml

from tests.dag import ROOT

PAPERS = {"arXiv:2405.14670", "arXiv:2303.06530", "arXiv:2301.02982"}  # FBN, FixBN, FedTAN


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_yml_holds_every_requirement_of_the_test_command():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in (*project["dependencies"],
                                 *project["optional-dependencies"]["dev"],
                                 *project["optional-dependencies"]["notebooks"])}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    (pip,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert wanted - {_name(r) for r in pip} == set()


def test_the_licence_and_the_citation_of_the_three_papers():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    cited = {i["value"] for r in cff["references"] for i in r["identifiers"]}
    assert cited == PAPERS
