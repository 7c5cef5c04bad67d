"""LocalState reads a file again whenever it was replaced or rewritten, and only then."""

from __future__ import annotations

import builtins
import os

from elections.ports.local.localstate import Leadership, LocalState


def _age(path, seconds: float = 5.0) -> None:
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def test_an_unchanged_file_is_not_read_again_and_a_replaced_or_rewritten_one_is(tmp_path, monkeypatch):
    writer, reader = LocalState(tmp_path), LocalState(tmp_path)
    writer.write_leadership(Leadership(node="S001", epoch=3, leader=True))
    _age(tmp_path / "leadership.json")
    assert reader.leadership().epoch == 3
    opened = []
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    assert reader.leadership().epoch == 3 and opened == []  # one stat, no read
    writer.write_leadership(Leadership(node="S001", epoch=4, leader=True))  # replaced (a new inode)
    assert reader.leadership().epoch == 4
    _age(tmp_path / "leadership.json")
    reader.leadership()
    path = tmp_path / "leadership.json"
    path.write_text(path.read_text().replace('"epoch": 4', '"epoch": 5'))  # rewritten in place
    assert reader.leadership().epoch == 5
    path.unlink()
    assert reader.leadership().epoch is None
