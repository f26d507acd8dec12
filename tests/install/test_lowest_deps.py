"""How `make lowest-deps` reads pyproject.toml: which extras it installs, what it pins. (The step
itself, a real install and smoke run, is run by `make test`; see lowest_deps.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.install.lowest_deps import ROOT, Problem, read_project, same_version

PYPROJECT = """
[project]
name = "herald"
dependencies = ["rich>=13", "openai >= 1.45, <4"]

[project.optional-dependencies]
web = ["httpx>=0.27", "lxml_html_clean>=0.1.0"]
browser = ["playwright[extra]>=1.59"]
dev = ["pytest>=8"]
all = ["herald[web,browser]"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    return path


def test_every_direct_runtime_dependency_is_pinned_to_its_minimum(tmp_path: Path) -> None:
    extras, pins = read_project(write(tmp_path, PYPROJECT))
    assert extras == ["web", "browser"]  # not dev (tools for working on Herald), not all (only names others)
    assert [p.constraint for p in pins] == [
        "httpx==0.27", "lxml-html-clean==0.1.0", "openai==1.45", "playwright==1.59", "rich==13",
    ]


@pytest.mark.parametrize("requirement", ["docker", "docker<8", "docker==7"])
def test_a_dependency_without_a_minimum_is_refused(tmp_path: Path, requirement: str) -> None:
    text = PYPROJECT.replace('["httpx>=0.27"', f'["{requirement}", "httpx>=0.27"')
    with pytest.raises(Problem, match=rf"'{requirement}' declares no minimum version"):
        read_project(write(tmp_path, text))


def test_herald_declares_the_html_cleaner_itself() -> None:
    """pip < 23.3 installs justext's `lxml[html_clean]` without lxml_html_clean (no PEP 685
    normalisation of the extra's name), so the web extra must name it."""
    extras, pins = read_project(ROOT / "pyproject.toml")
    assert {"web", "browser", "docker", "ssh", "modal"} <= set(extras) and "dev" not in extras
    assert "lxml-html-clean" in {p.name for p in pins}


def test_versions_compare_by_release() -> None:
    assert same_version("7.0.0", "7") and same_version("0.34.0", "0.34") and same_version("1.4.3", "1.4.3")
    assert not same_version("1.4.30", "1.4.3") and not same_version(None, "1")
