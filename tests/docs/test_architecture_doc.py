"""docs/architecture.md's package table and its table of compiled loops are generated from the tree: the
committed page is what scripts/gen_architecture_doc.py prints, every module and C file is on it, and what
the generator reads off the source (first sentences, the modules that choose a compiled loop) is right."""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.files import ROOT
from tests.support.script_support import load_script

GATEWAY = ROOT / "gateway"
PAGE = ROOT / "docs" / "architecture.md"


@pytest.fixture(scope="module")
def doc() -> ModuleType:
    return load_script("gen_architecture_doc")


def test_the_architecture_page_is_generated(doc: ModuleType) -> None:
    committed = PAGE.read_text(encoding="utf-8")
    assert committed == doc.page_with(committed), (
        "docs/architecture.md is stale (a module or C file was added, moved or renamed, or the first "
        "sentence of a docstring changed): run `python scripts/gen_architecture_doc.py` and commit it"
    )


def test_every_module_and_c_file_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    modules = [p for p in GATEWAY.rglob("*.py") if "pb" not in p.parts and p.name != "__init__.py"]
    assert len(modules) > 200
    missing = [str(p.relative_to(ROOT)) for p in modules if f"| `{p.stem}` |" not in page]
    sections = [p.parent.relative_to(GATEWAY).as_posix() for p in modules]
    missing += [
        f"section gateway/{s}/"
        for s in sorted(set(sections))
        if s != "." and f"### `gateway/{s}/`" not in page
    ]
    sources = list(GATEWAY.rglob("*.c"))
    assert len(sources) >= 1
    missing += [
        str(p.relative_to(ROOT)) for p in sources if f"| `{p.relative_to(ROOT).as_posix()}` |" not in page
    ]
    assert not missing, f"not on docs/architecture.md: {missing}"


def test_the_modules_that_choose_a_compiled_loop_are_found(doc: ModuleType) -> None:
    # by name, through compiled_or
    assert doc.extensions_used(GATEWAY / "grpc" / "consumed_wire.py") == {"gateway.grpc._consumed_wire"}
    assert doc.extensions_used(GATEWAY / "tubemq" / "wire" / "rpc.py") == {"gateway.tubemq.wire._rpc"}
    assert doc.extensions_used(GATEWAY / "tubemq" / "wire" / "slots.py") == {"gateway.tubemq.wire._slots"}
    # the switch and the face that re-exports it choose nothing themselves, nor a user of slots_constructor
    assert doc.extensions_used(GATEWAY / "service" / "delivered.py") == set()
    assert doc.extensions_used(GATEWAY / "tubemq" / "wire" / "speedups.py") == set()
    assert doc.extensions_used(GATEWAY / "tubemq" / "wire" / "__init__.py") == set()
    assert doc.extensions_used(GATEWAY / "tubemq" / "wire" / "frame.py") == set()


def test_a_first_sentence_ends_at_a_full_stop_outside_code(doc: ModuleType) -> None:
    text = "Reads ``a. b`` and e.g. more. Then the rest.\nStill the rest.\n\nAnother paragraph."
    assert doc.first_sentence(text) == "Reads ``a. b`` and e.g. more."
    assert doc.first_sentence("No stop at all\nover two lines\n\nnext") == "No stop at all over two lines"
    assert doc.first_sentence("Version 1.2 is kept.") == "Version 1.2 is kept."


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_a_first_sentence_is_one_line_from_the_first_paragraph(doc: ModuleType, text: str) -> None:
    sentence = doc.first_sentence(text)
    assert "\n" not in sentence
    assert " ".join(sentence.split()) == sentence
    first = " ".join(text.strip().split("\n\n")[0].split())
    assert first.startswith(sentence)


def test_a_cell_is_one_table_cell(doc: ModuleType) -> None:
    assert (
        doc.cell("Reads ``a|b`` and :class:`~x.Y` (issue #26), a|b *c*")
        == "Reads `a|b` and `x.Y`, a\\|b \\*c\\*"
    )
