"""A table of malformed recipes and the exact line each one gets (exit 2, nothing read or written)."""

from __future__ import annotations

import pytest

GOOD = """\
id = "r"
summary = "widen a list"
rationale = "because"
bundles = ["b"]

[engines]
sglang = ">=0.5.9"

[[ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/x.py"
scope = "f"
[ops.locator]
contains = ['"a"']
[ops.params]
element = '"b"'
"""

# Version variants and blockers (`when`, [[variants]], [[blockers]]).
VARIANT = """
[[variants]]
when = { sglang = ">=0.5.19" }
[[variants.ops]]
kind = "list-element"
engine = "sglang"
file = "sglang/srt/x.py"
[variants.ops.locator]
contains = ['"a"']
[variants.ops.params]
element = '"b"'
"""
BLOCKER = """
[[blockers]]
engine = "sglang"
file = "sglang/srt/y.py"
scope = "g"
contains = ["raise"]
message = "g refuses"
"""

# What `verify --build` proves ([verify]); the op names a JIT module an expectation may name.
VERIFY = """
[verify]
arch = ["120a"]
count = ["griddepcontrol"]
[[verify.expect]]
kind = "same-count"
arch = "120a"
instruction = "griddepcontrol"
as_arch = "90a"
"""


def _with_verify(s: str, old: str = "", new: str = "") -> str:
    jit = s.replace('scope = "f"\n', 'scope = "f"\njit_modules = ["trtllm_comm"]\n')
    return jit + VERIFY.replace(old, new)


CASES = [
    # (name, edit to GOOD, expected stderr line)
    (
        "verify: unknown key",
        lambda s: _with_verify(s, "count =", "counts ="),
        "r.toml:22 > verify > counts: unknown key 'counts' (hint: did you mean 'count'?)",
    ),
    (
        "verify: arch not a list",
        lambda s: _with_verify(s, 'arch = ["120a"]', 'arch = "120a"'),
        "r.toml:21 > verify > arch: must be a list of strings, not string '120a' (hint: e.g. arch = [\"...\"])",
    ),
    (
        "verify: bad arch",
        lambda s: _with_verify(s, '["120a"]', '["sm_120a"]'),
        "r.toml:21 > verify > arch: 'sm_120a' is not a CUDA arch (hint: write the compute capability's digits"
        ' and its suffix, e.g. "120a" (sm_120a) or "90a")',
    ),
    (
        "verify: bad instruction to count",
        lambda s: _with_verify(s, 'count = ["griddepcontrol"]', 'count = ["grid dep"]'),
        "r.toml:22 > verify > count: 'grid dep' is not a PTX instruction name (hint: e.g. count ="
        ' ["griddepcontrol", "mma.sync"])',
    ),
    (
        "verify: unknown expectation",
        lambda s: _with_verify(s, '"same-count"', '"same-counts"'),
        "r.toml:24 > verify > expect #1 > kind: unknown expectation 'same-counts' (hint: kinds:"
        " no-empty-kernels, same-count)",
    ),
    (
        "verify: expectation missing a key",
        lambda s: _with_verify(s, 'as_arch = "90a"\n', ""),
        "r.toml:23 > verify > expect #1 > as_arch: is required (hint: same-count needs arch, instruction, as_arch)",
    ),
    (
        "verify: a key the kind does not take",
        lambda s: _with_verify(s, '"same-count"', '"no-empty-kernels"'),
        "r.toml:26 > verify > expect #1 > instruction: no-empty-kernels takes no instruction (hint:"
        " no-empty-kernels takes arch, module)",
    ),
    (
        "verify: compared with itself",
        lambda s: _with_verify(s, 'as_arch = "90a"', 'as_arch = "120a"'),
        "r.toml:27 > verify > expect #1 > as_arch: is the arch itself (hint: compare with another arch, e.g. 90a)",
    ),
    (
        "verify: a module no op names",
        lambda s: _with_verify(s, 'as_arch = "90a"', 'as_arch = "90a"\nmodule = "vllm_comm"'),
        "r.toml:28 > verify > expect #1 > module: 'vllm_comm' is not a JIT module any op of the recipe names"
        " (hint: the ops' jit_modules: trtllm_comm)",
    ),
    (
        "unknown top key",
        lambda s: s.replace('bundles = ["b"]', 'bundles = ["b"]\nbundle = "x"'),
        "r.toml:5 > bundle: unknown key 'bundle' (hint: did you mean 'bundles'?)",
    ),
    (
        "id wrong type",
        lambda s: s.replace('id = "r"', "id = 3"),
        'r.toml:1 > id: must be a string, not int 3 (hint: e.g. id = "...")',
    ),
    (
        "id mismatch",
        lambda s: s.replace('id = "r"', 'id = "other"'),
        "r.toml:1 > id: 'other' does not match the file name 'r.toml' (hint: rename the file to other.toml or set "
        "id = 'r')",
    ),
    (
        "missing summary",
        lambda s: s.replace('summary = "widen a list"\n', ""),
        "r.toml: missing required key 'summary' (hint: a recipe needs id, summary, rationale, bundles, [engines] "
        "and [[ops]])",
    ),
    (
        "bad specifier",
        lambda s: s.replace('">=0.5.9"', '">=banana"'),
        "r.toml:7 > engines > sglang: '>=banana' is not a valid version specifier (hint: use PEP 440, e.g. "
        '">=0.5.9,<0.5.13")',
    ),
    (
        "unknown engine",
        lambda s: s.replace('sglang = ">=0.5.9"', 'sglang = ">=0.5.9"\ntgi = ">=0.1"'),
        "r.toml:8 > engines > tgi: unknown engine 'tgi' (hint: engines: sglang, flashinfer, vllm)",
    ),
    (
        "unknown op kind",
        lambda s: s.replace('kind = "list-element"', 'kind = "list-elemnt"'),
        "r.toml:10 > op #1 > kind: unknown op kind 'list-elemnt' (hint: did you mean 'list-element'?)",
    ),
    (
        "op engine not in engines",
        lambda s: s.replace('engine = "sglang"', 'engine = "flashinfer"'),
        "r.toml:11 > op #1 > engine: engine 'flashinfer' is not in the recipe's [engines] (hint: add flashinfer = "
        '"<versions>" under [engines])',
    ),
    (
        "unknown op key",
        lambda s: s.replace('scope = "f"', 'scope = "f"\nscop = "g"'),
        "r.toml:14 > op #1 > scop: unknown key 'scop' (hint: did you mean 'scope'?)",
    ),
    (
        "unknown locator key",
        lambda s: s.replace("contains = ['\"a\"']", "contain = ['\"a\"']"),
        "r.toml:15 > op #1 > locator > contain: unknown key 'contain' (hint: did you mean 'contains'?)",
    ),
    (
        "param wrong type",
        lambda s: s.replace("element = '\"b\"'", "element = 12"),
        'r.toml:17 > op #1 > params > element: must be a string, not int 12 (hint: e.g. element = "...")',
    ),
    (
        "missing required param",
        lambda s: s.replace("element = '\"b\"'", ""),
        "r.toml:16 > op #1 > params.element: is required (hint: list-element needs params.element)",
    ),
    (
        "param not python",
        lambda s: s.replace("element = '\"b\"'", "element = '\"b'"),
        "r.toml:17 > op #1 > params.element: is not a Python expression: '\"b' (tokenizer error: unterminated "
        "string literal) (hint: see the list-element row of the op table in docs/recipes.md)",
    ),
    (
        "absolute path",
        lambda s: s.replace('file = "sglang/srt/x.py"', 'file = "/etc/passwd.py"'),
        "r.toml:12 > op #1 > file: '/etc/passwd.py' is an absolute path (hint: name the file relative to the "
        "package, e.g. 'sglang/srt/server_args.py')",
    ),
    (
        "dotdot path",
        lambda s: s.replace('file = "sglang/srt/x.py"', 'file = "sglang/../../x.py"'),
        "r.toml:12 > op #1 > file: 'sglang/../../x.py' climbs out of the target with '..' (hint: name the file "
        "relative to the package)",
    ),
    (
        "wrong engine prefix",
        lambda s: s.replace('file = "sglang/srt/x.py"', 'file = "flashinfer/jit/comm.py"'),
        "r.toml:12 > op #1 > file: 'flashinfer/jit/comm.py' is not a sglang file (hint: sglang files start with "
        "sglang/)",
    ),
    (
        "python op on cuda file",
        lambda s: s.replace('file = "sglang/srt/x.py"', 'file = "sglang/srt/x.cuh"'),
        "r.toml:12 > op #1 > file: list-element edits Python files, and 'sglang/srt/x.cuh' is not one (hint: use "
        "text-hunk (or text-replace) for C++/CUDA/CMake files)",
    ),
    (
        "bad scope",
        lambda s: s.replace('scope = "f"', 'scope = "f..g"'),
        "r.toml:13 > op #1 > scope: 'f..g' is not a qualified name (hint: e.g. "
        "'ServerArgs._handle_moe_kernel_config', or leave it out for module level)",
    ),
    (
        "two locator forms",
        lambda s: s.replace("contains = ['\"a\"']", 'contains = [\'"a"\']\nkeyword = "k"'),
        "r.toml:14 > op #1 > locator: needs exactly one of contains, keyword, membership, target (hint: e.g. "
        "locator = { contains = ['\"flashinfer_trtllm\"'] })",
    ),
    (
        "invalid toml",
        lambda s: s.replace('summary = "widen a list"', 'summary = "widen a list'),
        "r.toml:2: invalid TOML: ",
    ),
    (
        "no ops",
        lambda s: "ops = []\n" + s.split("[[ops]]")[0],
        "r.toml:1 > ops: recipe has no ops (hint: add at least one [[ops]] table)",
    ),
    (
        "text op zero count",
        lambda s: (
            s.replace('kind = "list-element"', 'kind = "text-replace"')
            .replace('file = "sglang/srt/x.py"', 'file = "sglang/srt/x.cuh"')
            .replace('scope = "f"\n', "")
            .split("[ops.locator]")[0]
            + '[ops.params]\nfind = "a"\nreplace = "b"\ncount = 0\n'
        ),
        "r.toml:16 > op #1 > params.count: must be at least 1, not 0 (hint: see the text-replace row of the op table "
        "in docs/recipes.md)",
    ),
    (
        "when bad specifier",
        lambda s: s.replace('scope = "f"', 'scope = "f"\nwhen = { sglang = ">=banana" }'),
        "r.toml:14 > op #1 > when > sglang: '>=banana' is not a valid version specifier (hint: e.g. "
        '">=0.5.19,<0.5.21")',
    ),
    (
        "when wrong type",
        lambda s: s.replace('scope = "f"', 'scope = "f"\nwhen = { sglang = 5 }'),
        "r.toml:14 > op #1 > when > sglang: must be a PEP 440 specifier string, not int 5 (hint: e.g. when "
        '= { sglang = ">=0.5.19" })',
    ),
    (
        "when engine not in engines",
        lambda s: s.replace('scope = "f"', 'scope = "f"\nwhen = { flashinfer = ">=0.6" }'),
        "r.toml:14 > op #1 > when > flashinfer: engine 'flashinfer' is not in the recipe's [engines] (hint: "
        "name one of sglang)",
    ),
    (
        "variant without when",
        lambda s: s + VARIANT.replace('when = { sglang = ">=0.5.19" }\n', ""),
        "r.toml:19 > variant #1 > when: is required (hint: a [[variants]] table has `when` and its [[variants.ops]])",
    ),
    (
        "variant op with its own when",
        lambda s: (
            s
            + VARIANT.replace(
                'file = "sglang/srt/x.py"\n[variants', 'file = "sglang/srt/x.py"\nwhen = { sglang = "<1" }\n[variants'
            )
        ),
        "r.toml:25 > variant #1 > op #2 > when: an op of a variant takes the variant's `when` (hint: move "
        "the op out of [[variants]], or into a variant with its own `when`)",
    ),
    (
        "unknown variant key",
        lambda s: s + VARIANT.replace("[[variants.ops]]", "whn = 1\n[[variants.ops]]"),
        "r.toml:21 > variant #1 > whn: unknown key 'whn' (hint: did you mean 'when'?)",
    ),
    (
        "blocker without contains",
        lambda s: s + BLOCKER.replace('contains = ["raise"]\n', ""),
        "r.toml:19 > blocker #1 > contains: is required and must not be empty (hint: a blocker needs "
        "engine, file, contains (code fragments, in order) and message; scope and when are optional)",
    ),
    (
        "blocker engine not in engines",
        lambda s: (
            s
            + BLOCKER.replace(
                'engine = "sglang"\nfile = "sglang/srt/y.py"', 'engine = "flashinfer"\nfile = "flashinfer/y.py"'
            )
        ),
        "r.toml:20 > blocker #1 > engine: engine 'flashinfer' is not in the recipe's [engines] (hint: add "
        'flashinfer = "<versions>" under [engines])',
    ),
    (
        "blocker empty fragment",
        lambda s: s + BLOCKER.replace('["raise"]', '["raise", "  "]'),
        "r.toml:23 > blocker #1 > contains: holds an empty fragment (hint: every file contains it; remove it)",
    ),
    # issue 20: the statement, branch, argument, dict and hunk kinds
    (
        "text-hunk without context",
        lambda s: _op(s, "text-hunk", "sglang/srt/x.cuh", "", 'hunk = "-a\\n+b\\n"'),
        "r.toml:14 > op #1 > params.hunk: has no context line (hint: keep at least one unchanged line around the"
        " change, with a space)",
    ),
    (
        "delete-stmt without a neighbour",
        lambda s: _op(s, "delete-stmt", "sglang/srt/x.py", 'match = "x = 1"', ""),
        "r.toml:14 > op #1 > locator: needs after or before (the statement next to the one deleted), so that revert"
        ' knows where it goes (hint: e.g. locator = { match = "x = 1", after = "y = 2" })',
    ),
    (
        "add-branch before the if",
        lambda s: _op(
            s, "add-branch", "sglang/srt/x.py", 'branch = "if a"\nposition = "before"', 'code = "elif b: pass"'
        ),
        "r.toml:16 > op #1 > locator.position: nothing goes before a chain's `if` (hint: add it after that branch)",
    ),
    (
        "call-arg keyword and index",
        lambda s: _op(s, "call-arg", "sglang/srt/x.py", 'call = "f"', 'keyword = "k"\nindex = 0\nvalue = "1"'),
        'r.toml:16 > op #1 > params: needs exactly one of keyword, index (hint: e.g. keyword = "default")',
    ),
]


def _op(text: str, kind: str, file: str, locator: str, params: str) -> str:
    """GOOD with its op replaced by one of ``kind``."""
    op = f'[[ops]]\nkind = "{kind}"\nengine = "sglang"\nfile = "{file}"\n'
    if file.endswith(".py"):
        op += 'scope = "f"\n'
    if locator:
        op += f"[ops.locator]\n{locator}\n"
    if params:
        op += f"[ops.params]\n{params}\n"
    return text[: text.index("[[ops]]")] + op


@pytest.mark.parametrize("name,edit,expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_recipe(tmp_path, run_cli, name, edit, expected):
    d = tmp_path / "recipes"
    d.mkdir()
    text = edit(GOOD)
    assert text != GOOD, "the case must change the recipe"
    (d / "r.toml").write_text(text)
    code, out, err = run_cli("--recipes", str(d), "list", "r", cwd=tmp_path)  # named: its error
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    prefix = f"patchkit: error: {d}/"  # the recipe as its directory was named, whatever the cwd
    assert line.startswith(prefix)
    if expected.endswith(": "):
        assert line[len(prefix) :].startswith(expected)
    else:
        assert line == prefix + expected
    assert "Traceback" not in err


def test_good_recipe_loads(tmp_path, run_cli):
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "r.toml").write_text(GOOD)
    code, out, err = run_cli("--recipes", str(d), "list", cwd=tmp_path)
    assert code == 0, err
    assert out.startswith("r ")


def test_shipped_recipes_load(run_cli, recipes_dir):
    code, out, err = run_cli("--recipes", str(recipes_dir), "list", "--json")
    assert code == 0, err
    import json

    doc = json.loads(out)
    assert [r["id"] for r in doc["recipes"]] == [
        "allreduce-fusion",
        "autotune-cutlass",
        "max-running-requests",
        "moe-backend-sm120",
        "vllm-allreduce-fusion",
    ]
    assert doc["bundles"] == {
        "sm120": ["allreduce-fusion", "autotune-cutlass", "max-running-requests", "moe-backend-sm120"],
        "vllm-sm120": ["vllm-allreduce-fusion"],
    }
