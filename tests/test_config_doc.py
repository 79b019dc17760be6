"""docs/config.md is generated from the config's dataclasses; it must say what the code does."""
import os
from dataclasses import fields

from conftest import ROOT

from evolve.config.reference import reference
from evolve.config.schema import SECTIONS
from evolve.search.space import VOCABULARY


def test_the_config_reference_is_current():
    with open(os.path.join(ROOT, "docs", "config.md")) as f:
        on_disk = f.read()
    assert on_disk == reference(), "docs/config.md is out of date: run  python -m evolve.config.reference > docs/config.md"


def test_every_key_and_gene_is_documented_with_a_meaning():
    text = reference()
    for section, cls in SECTIONS.items():
        assert f"## [{section}]" in text
        for f in fields(cls):
            row = next(line for line in text.splitlines() if line.startswith(f"| `{f.name}` |"))
            assert row.rstrip(" |").split("|")[-1].strip(), f"{section}.{f.name} has no meaning: comment its line in evolve/config/schema.py"
    for gene in VOCABULARY:
        assert f"| `{gene}` |" in text
