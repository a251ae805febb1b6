"""RECORD rewriting: only the rows of changed files (and their bytecode) are read as CSV,
and the result is the one reading every row gives."""

from __future__ import annotations

import pytest

from patchkit.core import record

ROWS = [
    "pkg/__init__.py,sha256=aaa,10",
    '"pkg/configs/E=1,N=2.json",sha256=bbb,20',
    "pkg/mod.py,sha256=ccc,30",
    "pkg/__pycache__/mod.cpython-311.pyc,sha256=ddd,40",
    "pkg/__pycache__/mod.cpython-311.opt-1.pyc,,",
    "pkg/sub/mod.py,sha256=eee,50",
    '"pkg/odd,name.py",sha256=fff,60',
    "pkg/__pycache__/odd,name.cpython-311.pyc,sha256=ggg,70",
    "pkg-1.0.dist-info/RECORD,,",
]


def _tree(tmp_path, newline: str, rows=ROWS):
    di = tmp_path / "pkg-1.0.dist-info"
    di.mkdir()
    (di / "RECORD").write_bytes(newline.join(rows).encode() + newline.encode())
    for rel in ("pkg/mod.py", "pkg/odd,name.py", "pkg/sub/mod.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"old\n")
    return tmp_path


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("changed", [["pkg/mod.py"], ["pkg/odd,name.py", "pkg/sub/mod.py"], ["pkg/nowhere.py"]])
def test_updates_read_only_the_changed_rows_and_write_what_reading_all_writes(tmp_path, monkeypatch, newline, changed):
    root = _tree(tmp_path, newline)
    changes = [(root / rel, b"new bytes\n", b"old\n") for rel in changed]
    mem_fast: dict = {}
    fast = record.updates(root, changes, mem_fast)
    monkeypatch.setattr(record, "_near", lambda text, needles: None)  # every row read as CSV
    mem_all: dict = {}
    every = record.updates(root, changes, mem_all)
    assert fast == every and mem_fast == mem_all
    if "pkg/nowhere.py" not in changed:
        assert fast and b"new bytes" not in fast[0][1] and record.hash_of(b"new bytes\n").encode() in fast[0][1]


def test_updates_read_only_rows_that_name_a_changed_file(tmp_path, monkeypatch):
    root = _tree(tmp_path, "\n")
    read: list[str] = []
    real_row = record._row
    monkeypatch.setattr(record, "_row", lambda line, *a: read.append(line) or real_row(line, *a))
    record.updates(root, [(root / "pkg/mod.py", b"new\n", b"old\n")], {})
    assert sorted(r.split(",")[0] for r in read) == sorted(
        ["pkg/mod.py", "pkg/__pycache__/mod.cpython-311.pyc", "pkg/__pycache__/mod.cpython-311.opt-1.pyc"]
    )


def test_a_bare_carriage_return_in_a_record_is_read_as_before(tmp_path):
    rows = [*ROWS[:2], "pkg/cr\rrow.py,sha256=x,1", *ROWS[2:]]
    root = _tree(tmp_path, "\n", rows)
    with pytest.raises(Exception, match="new-line character"):  # csv's own refusal, as before
        record.updates(root, [(root / "pkg/mod.py", b"new\n", b"old\n")], {})
