"""The layout section of docs/architecture.md is written from the code (scripts/layout.py): every module's one
job is the first line of its docstring, so a newcomer finds any file's job in one line."""

from __future__ import annotations

import subprocess
import sys

from harness import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import layout


def test_every_module_of_the_product_says_its_job_in_its_docstrings_first_line():
    assert layout.modules() and layout.missing() == []


def test_the_architecture_pages_layout_is_the_one_the_code_writes():
    script = str(ROOT / "scripts" / "layout.py")
    done = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_module_added_without_a_line_in_the_layout_is_noticed(tmp_path, monkeypatch):
    page = tmp_path / "architecture.md"
    page.write_text((ROOT / "docs" / "architecture.md").read_text())
    monkeypatch.setattr(layout, "PAGE", page)
    assert layout.main(["--check"]) == 0
    text = page.read_text()
    page.write_text(text.replace("    decide.py", "    decided.py", 1))  # a hand edit, or a file renamed
    assert layout.main(["--check"]) == 1
    assert layout.main([]) == 0 and page.read_text() == text


def test_the_import_contracts_table_is_written_from_pyproject(tmp_path, monkeypatch):
    page = tmp_path / "architecture.md"
    page.write_text((ROOT / "docs" / "architecture.md").read_text())
    monkeypatch.setattr(layout, "PAGE", page)
    text = page.read_text()
    assert "| the pure core and the wire protocol do no I/O and read no clock | forbidden |" in text
    edited = text.replace("| the server never imports the client", "| the server imports what it likes", 1)
    page.write_text(edited)
    assert layout.main(["--check"]) == 1
    assert layout.main([]) == 0 and page.read_text() == text
