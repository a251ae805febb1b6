"""The gates report for people (patchkit/commands/gates.py): repeats folded, a summary per
component, the numbers `--draft --only` names kept, --all unfolded."""

from __future__ import annotations

from patchkit.commands import gates as C
from patchkit.core.goals.device import Device
from patchkit.upstream import gates as G
from tests.conftest import mini_sglang, pk

DEV, CMP = Device.parse("12.0"), Device.parse("10.0")
WHY = "false for 12.0: no element admits it"


def gate(path, line, cond, function="", kind="arch-list", why=WHY, guards=""):
    return G.Gate("flashinfer", path, path, line, kind, cond, why, function=function, guards=guards)


def scan(closed):
    return [(G.Scan("flashinfer", "/t", "0.1", closed=closed, files=9, parsed=9), 0.1)]


def rows():
    a = '["sm_100a", "sm_103a"]'
    gs = [gate("flashinfer/jit/x.py", 10 * i, a, guards=f"g{i % 2}") for i in range(1, 8)]
    gs.insert(3, gate("flashinfer/jit/x.py", 35, '["sm_100a"]'))
    gs.append(gate("flashinfer/jit/x.py", 90, a, function="f"))  # another function: its own row
    gs.append(gate("flashinfer/data/generated/k.cuh", 5, "__CUDA_ARCH__ == 1000", kind="#if", why="false"))
    gs.append(gate("flashinfer/data/generated/l.cuh", 5, "__CUDA_ARCH__ == 1000", kind="#if", why="false"))
    gs.append(gate("flashinfer/utils.py", 3, "major == 10", kind="if", why="false"))
    return gs


def test_repeats_fold_into_one_row_that_keeps_the_numbers():
    s = scan(rows())
    numbered = C._numbers(s, s[0][0])
    assert [n for n, _ in numbered] == list(range(1, 13))  # the numbers --json and --draft use
    text = "\n".join(C.report(DEV, CMP, s, False))
    # gates 1-3 and 5-8 (x.py, module level): one row, the first gate's number, count, lines, numbers
    assert '    #1   x7    arch-list ["sm_100a", "sm_103a"]' in text
    assert "lines 10, 20, 30, 40 ... and 3 more; numbers 1-3,5-8" in text
    assert "guards: g1 (and 1 other)" in text
    assert '#4      35  arch-list ["sm_100a"]' in text  # a different condition stays apart
    assert '#9      90  arch-list ["sm_100a", "sm_103a"]' in text  # same condition, other function
    assert sum(t.startswith("    #") for t in text.splitlines()) == 6  # 6 rows for 12 gates


def test_summary_per_component_marks_generated_code():
    text = C.report(DEV, CMP, scan(rows()), False)
    i = next(i for i, t in enumerate(text) if t.startswith("by component"))
    assert "(6 rows below for 12 gates" in text[i]
    summary = text[i + 1 : i + 4]
    assert summary[0].split() == ["flashinfer/jit/", "9", "closed", "1", "files", "2", "conditions"]
    assert summary[1].split() == ["flashinfer/data/", "2", "closed", "2", "files", "1", "conditions", "[generated]"]
    assert summary[2].split()[:2] == ["flashinfer/*", "1"]
    assert "flashinfer/data/generated/k.cuh [generated]" in text


def test_all_prints_every_gate_with_its_number():
    text = C.report(DEV, CMP, scan(rows()), False, every=True)
    assert not any(t.startswith("by component") for t in text)
    numbers = [int(t.split()[0][1:]) for t in text if t.startswith("    #")]
    assert numbers == list(range(1, 13))


def test_runs_are_what_only_reads():
    assert C.runs([9, 3, 4, 5, 12]) == "3-5,9,12"
    assert C.runs(range(1, 30, 2)).endswith("(9 more runs; --all numbers each)")


def test_all_on_the_command_line(tmp_path):
    body = "".join(f"if is_sm100_supported():\n    go{i}()\n" for i in range(4))
    root = mini_sglang(tmp_path / "t", {"sglang/srt/a.py": body})
    r = pk("gates", "--device", "12.0", "-t", f"sglang={root}", cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "x4" in r.stdout and "numbers 1-4" in r.stdout
    every = pk("gates", "--device", "12.0", "-t", f"sglang={root}", "--all", cwd=tmp_path)
    assert every.returncode == 1 and "x4" not in every.stdout and "#4 " in every.stdout
    bad = pk("gates", "--device", "12.0", "--across", "sglang==0.5.9..0.5.23", "--all", cwd=tmp_path)
    assert bad.returncode == 2 and "--all" in bad.stderr


def test_a_component_that_holds_most_gates_is_split_one_level_further():
    paths = ["sglang/srt/layers/a.py"] * 3 + ["sglang/srt/models/b.py", "sglang/srt/c.py", "sglang/jit/d.py"]
    of = C.components(paths)
    assert of["sglang/srt/layers/a.py"] == "sglang/srt/layers/"
    assert of["sglang/srt/models/b.py"] == "sglang/srt/models/"
    assert of["sglang/srt/c.py"] == "sglang/srt/*"
    assert of["sglang/jit/d.py"] == "sglang/jit/"  # a fifth of the gates: kept whole
    assert C.components(["a.py", "b/c.py"]) == {"a.py": "*", "b/c.py": "b/"}


def test_one_gate_in_many_files_of_a_directory_is_one_row():
    d = "flashinfer/jit/k"
    gs = [gate(f"{d}/k{i}.py", 5 + i, "major == 10", kind="if", why="false") for i in range(5)]
    gs.insert(2, gate(f"{d}/k1.py", 50, "major == 9", kind="if", why="false"))  # another condition
    gs += [gate("flashinfer/jit/o/a.py", 1, "major == 10", kind="if", why="false")] * 2
    s = scan(gs)
    text = C.report(DEV, CMP, s, False)
    rows = [t for t in text if t.startswith("    #")]
    assert len(rows) == 3  # k/ (5 files), k1.py's other condition, o/a.py (x2: two files are not folded)
    assert f"{d}/ (5 files with this gate)" in text
    i = text.index(f"{d}/ (5 files with this gate)")
    assert text[i + 1].startswith("    #1   x5    if        major == 10")
    assert text[i + 2] == "           at k0.py:5, k1.py:6, k2.py:7, k3.py:8 ... and 1 more; numbers 1-2,4-6"
    assert "flashinfer/jit/o/a.py" in text
    assert not any(t.startswith("by mechanism") for t in text)  # a Python condition stays on its files
    every = [t for t in C.report(DEV, CMP, s, False, every=True) if t.startswith("    #")]
    assert len(every) == 8


def test_one_arch_list_or_guard_over_many_files_is_one_mechanism_row():
    """JIT specs and generated kernels repeat one arch list or #if guard, spelled several ways,
    in many files of many components: one row each, with its components, first file:lines and
    every number; a list or guard in fewer files, and every Python condition, stay by file."""
    specs = [
        gate(f"flashinfer/cake_{c}_backend/cake_jit.py", 10 + i, spelled, function=f"gen_{c}")
        for i, (c, spelled) in enumerate(
            [
                ("a", '["sm_100a", "sm_103a"]'),
                ("b", '[ "sm_100a", "sm_103a", ]'),
                ("c", 'targets=("sm_100a", "sm_103a")'),
            ]
        )
    ]
    kernels = [
        gate(f"flashinfer/data/csrc/k{i}/k.cu", 7, cond, kind="#if", why="false for 12.0: __CUDA_ARCH__ is 1200")
        for i, cond in enumerate(["__CUDA_ARCH__ == 1000", "(__CUDA_ARCH__ == 1000)", "__CUDA_ARCH__ == 1000"])
    ]
    lone = gate("flashinfer/jit/x.py", 3, '["sm_100a", "sm_107a"]')  # one file: by file
    other = gate("flashinfer/data/csrc/m.cu", 9, "(__CUDA_ARCH__ == 1000) || (__CUDA_ARCH__ == 1030)", kind="#if")
    py = [gate(f"flashinfer/p{i}.py", 1, "major == 10", kind="if", why="false") for i in range(3)]
    s = scan(specs + kernels + [lone, other] + py)
    numbered = C._numbers(s, s[0][0])
    mech, rest = C.mechanisms(C.folds(numbered))
    assert [len(f.gates) for f in mech] == [3, 3] and all(f.mechanism for f in mech)
    assert sorted(n for f in mech + rest for n in f.numbers) == list(range(1, 12))  # every number once
    assert {f.gates[0].kind for f in rest} == {"arch-list", "#if", "if"}  # the lone list, `||` guard, Python
    text = C.report(DEV, CMP, s, False)
    assert any(t.startswith("by mechanism (2 rows for 6 gates") for t in text)
    j = text.index('arch list ["sm_100a", "sm_103a"] (3 spellings) in 3 files of 3 components')
    assert text[j + 1].startswith("    #")
    assert text[j + 2].startswith("           in flashinfer/cake_a_backend/ 1, flashinfer/cake_b_backend/ 1,")
    assert text[j + 3].startswith("           at flashinfer/cake_a_backend/cake_jit.py:10, flashinfer/cake_b_backend")
    lists = next(f for f in mech if f.gates[0].kind == "arch-list")
    assert text[j + 3].endswith("... and 1 more; numbers " + C.runs(lists.numbers))
    assert "guard __CUDA_ARCH__ == 1000 (2 spellings) in 3 files of 1 component" in text
    assert "by file:" in text and "flashinfer/jit/x.py" in text
