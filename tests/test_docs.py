"""The README and docs/: short, linked, and every table of measurements what its results file says."""

import re

from benchmarks.report import MARKER, PAGES, ROOT, render, stale_pages


def test_every_table_is_what_its_results_file_says():
    assert stale_pages() == [], "run python -m benchmarks.report"


def test_every_page_with_figures_names_its_results_files():
    tables = [match for page in PAGES for match in MARKER.finditer(page.read_text())]
    assert tables, "the pages generate their tables"
    for match in tables:
        assert (ROOT / match.group(3)).is_file(), match.group(3)


def test_a_page_that_differs_from_its_results_is_found():
    text = (ROOT / "docs" / "measurements.md").read_text()
    tampered = re.sub(r"\| (\d+\.\d+) \|", "| 999.99 |", text, count=1)
    assert tampered != text and render(tampered) == text


def test_readme_is_short_and_opens_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 12_000
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings[0] == "Two commands"
    assert "./dev demo" in readme and "./dev test" in readme


def test_links_into_docs_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(((?:docs/)?[\w-]+\.md)\)", page.read_text()):
            folder = page.parent
            assert (folder / target).is_file(), f"{page.name} links to {target}"


def test_resident_memory_is_a_table_of_the_models_page_not_of_the_readme():
    from benchmarks.report import headline, models

    growth = {"load_mib": 40.0, "first_call_mib": 651.4}
    row = {"model": "EnCodec", "threads": 1, "baseline": "stock, prepared", "ms": {"stock, prepared": 2.0}}
    row["ms"]["phaseconv"] = 1.0
    row["memory"] = {"phaseconv": {"default loader": growth, "weight cache": {"load_mib": 30, "first_call_mib": 35}}}
    data = {"meta": {"runs": 3}, "models": [row]}
    assert "| EnCodec | phaseconv | 40 / 651 | 30 / 35 |" in models(data)
    assert "Resident memory" not in headline(data)
