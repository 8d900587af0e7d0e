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


# A measured figure: a number with the unit of a time, size, rate, ratio or share.
FIGURE = re.compile(
    r"(?<![\w.\-/])\d+(?:\.\d+)?(?:\s?(?:ms|dB|MiB|MB|GiB|GB|KiB|GMAC/s|GB/s|%)\b|\ss\b|x\b)"
    r"|real-time factor (?:of )?\d|\bRTF\b\W+\d"
)
# Facts of the formats and models, not measurements.
NOT_MEASURED = ("80 ms", "30 s", "5 ms", "2 s")
GLOSSARY_TERMS = ("partition", "layout transpose", "stock", "polyphase", "interleave", "step program")
GLOSSARY_TERMS += ("real-time factor", "8da4w", "PCM step", "ETDump", "GMAC/s")


def prose(text: str) -> str:
    """A page without its generated blocks and code blocks: what its authors typed."""
    return re.sub(r"```.*?```", "", MARKER.sub("", text), flags=re.S)


def test_no_figure_outside_a_generated_block():
    found = [
        f"{page.name}: {line.strip()}"
        for page in PAGES
        for line in prose(page.read_text()).splitlines()
        if any(FIGURE.finditer(line)) and not any(fact in line for fact in NOT_MEASURED)
    ]
    assert not found, "figures typed into prose (generate them from results/):\n" + "\n".join(found)


def test_each_table_has_one_home():
    homes = [(match.group(2), match.group(3)) for page in PAGES for match in MARKER.finditer(page.read_text())]
    assert len(homes) == len(set(homes)), [home for home in homes if homes.count(home) > 1]


def test_every_table_names_where_when_and_how_it_was_measured():
    import json

    for page in PAGES:
        for match in MARKER.finditer(page.read_text()):
            meta = json.loads((ROOT / match.group(3)).read_text())["meta"]
            missing = {"cpu", "cpu_family", "cores", "date", "commit", "target", "threads"} - set(meta)
            assert not missing, f"{page.name}: {match.group(3)} does not record {sorted(missing)}"


def test_pages_that_use_the_terms_link_the_glossary():
    for page in PAGES:
        if page.name == "glossary.md":
            continue
        text = prose(page.read_text()).lower()
        used = [term for term in GLOSSARY_TERMS if term.lower() in text]
        assert not used or "glossary.md" in text, f"{page.name} uses {used} without linking the glossary"
