"""`patchkit gates --draft ID` (patchkit/authoring/draft*.py, patchkit/commands/gates_draft.py) on
miniature trees: the op kind each gate takes, the proof before anything is written, and each
refusal firing; and `gates` defaulting to the activated serving venv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from patchkit.core.goals import cppeval
from tests.conftest import gate_recipe, mini_sglang

UTILS = """\
def is_cuda():
    return True


def is_sm90_supported():
    return True


def is_sm100_supported():
    return True


def is_sm120_supported():
    return True
"""

MOD = """\
from sglang.srt.utils import is_cuda, is_sm90_supported, is_sm100_supported

_is_cuda = is_cuda()
_is_sm90_supported = _is_cuda and is_sm90_supported()
_is_sm100_supported = _is_cuda and is_sm100_supported()


def fusion(batch_size: int):
    return (
        (_is_sm90_supported or _is_sm100_supported)
        and batch_size > 0
    )


def resolve(backend):
    if not (is_sm90_supported() or is_sm100_supported()):
        raise ValueError("requires SM90 or SM10X")
    return backend


def runtime(server_args):
    if server_args.enable_x and is_sm100_supported():
        launch_fast_kernel()


def fallback():
    if not is_sm90_supported() and not is_sm100_supported():
        slow_path()
    else:
        fast_path()


def twice(x):
    if x and is_sm100_supported():
        a()
    if x and is_sm100_supported():
        b()


def lone():
    if is_sm100_supported():
        go()


def excluded():
    if not is_sm120_supported():
        register()


def excluded_ne(sm):
    if get_device_sm() != 120:
        register()


def is_sm100_family():
    return is_sm100_supported()


def no_analog():
    if is_blackwell_fast():
        go()


def jit():
    return gen_jit_spec("comm", supported_major_versions=[9, 10], archs=["sm_90a", "sm_100a"])


def checked():
    assert is_sm100_supported(), "needs SM100"


def pairs():
    return build(capabilities=[(9, 0), (10, 0)])
"""

# each function's gates, as the report numbers them, and what --draft does with them
N = {
    "flag": 1,  # _is_sm100_supported = ...: a flag named for a part
    "fusion": 2,  # or-operand (+ ensure-import, insert of the flag)
    "resolve": 3,  # or-operand
    "runtime": 4,  # replace-expr
    "fallback": 5,  # and-operand
    "twice_a": 6,
    "twice_b": 7,  # replace-expr: the chain stands twice in its scope
    "lone": 8,  # a lone check, the whole condition of its if
    "excluded": 9,  # shuts the device out by name
    "excluded_ne": 10,  # the same, by a comparison
    "family": 11,  # what a check named for a part returns
    "majors": 12,  # list-element 12
    "archs": 13,  # list-element "sm_120a"
    "checked": 14,  # replace-stmt: the assert
    "pairs": 15,  # list-element (12, 0)
}


def _tree(tmp_path: Path, extra: dict | None = None) -> Path:
    return mini_sglang(
        tmp_path / "sg",
        {
            "sglang/srt/utils/__init__.py": "from .common import *\n",
            "sglang/srt/utils/common.py": UTILS,
            "sglang/srt/layers/mod.py": MOD,
            **(extra or {}),
        },
    )


def _run(run_cli, tmp_path, *args):
    root = tmp_path / "sg"
    return run_cli("gates", "--device", "12.0", "-t", f"sglang={root}", *args, cwd=tmp_path)


def test_the_report_numbers_its_gates_as_draft_names_them(tmp_path, run_cli):
    _tree(tmp_path)
    code, out, _ = _run(run_cli, tmp_path, "--json")
    assert code == 1
    closed = json.loads(out)["trees"][0]["closed"]
    got = {g["n"]: (g["function"], g["condition"]) for g in closed}
    assert got[N["fusion"]] == ("fusion", "_is_sm90_supported or _is_sm100_supported")
    assert got[N["fallback"]] == ("fallback", "is_sm100_supported()")
    assert got[N["archs"]] == ("jit", 'archs=["sm_90a", "sm_100a"]')
    assert sorted(got) == list(range(1, len(N) + 1))
    code, out, _ = _run(run_cli, tmp_path)
    assert "    #3      16  if        is_sm90_supported() or is_sm100_supported()" in out


def test_draft_writes_a_recipe_with_the_op_kind_of_each_gate(tmp_path, run_cli):
    root = _tree(tmp_path)
    before = (root / "sglang/srt/layers/mod.py").read_bytes()
    only = ",".join(
        str(N[k]) for k in ("fusion", "resolve", "runtime", "fallback", "majors", "archs", "checked", "pairs")
    )
    code, out, err = _run(run_cli, tmp_path, "--draft", "widen-mod", "--only", only, "-o", "out")
    assert code == 0, out + err
    path = tmp_path / "out" / "widen-mod.toml"
    doc = tomllib.loads(path.read_text())
    ops = [(o["kind"], o.get("scope", ""), o.get("locator"), o.get("params")) for o in doc["ops"]]
    kinds = [k for k, *_ in ops]
    assert kinds.count("or-operand") == 2 and kinds.count("list-element") == 3
    assert ("ensure-import", "", {"module": "sglang.srt.utils"}) == ops[0][:3]
    assert ops[0][3]["name"] == "is_sm120_supported" and ops[0][3]["defined_in"] == "sglang/srt/utils/common.py"
    insert = next(o for o in ops if o[0] == "insert")
    assert insert[2] == {"anchor": "_is_sm100_supported = _is_cuda and is_sm100_supported()", "position": "after"}
    assert insert[3]["code"].strip() == "_is_sm120_supported = _is_cuda and is_sm120_supported()"
    assert ("or-operand", "fusion", {"operands": ["_is_sm90_supported", "_is_sm100_supported"]}) == next(
        o[:3] for o in ops if o[1] == "fusion"
    )
    assert next(o for o in ops if o[0] == "and-operand")[3] == {"operand": "not is_sm120_supported()"}
    assert next(o for o in ops if o[0] == "replace-expr")[3] == {
        "with": "server_args.enable_x and (is_sm100_supported() or is_sm120_supported())"
    }
    assert {o[3]["element"] for o in ops if o[0] == "list-element"} == {"12", '"sm_120a"', "(12, 0)"}
    assert next(o for o in ops if o[0] == "replace-stmt")[2:] == (
        {"match": 'assert is_sm100_supported(), "needs SM100"\n'},
        {"with": 'assert is_sm100_supported() or is_sm120_supported(), "needs SM100"\n'},
    )
    assert all("identity" in o for o in doc["ops"] if o["kind"] in ("or-operand", "and-operand", "replace-expr"))
    # the rationale says plainly what opening a gate does not do
    assert "3,700 to 236 tok/s" in doc["rationale"] and "does not make the code behind it work" in doc["summary"]
    assert "patchkit verify widen-mod --build" in doc["rationale"]  # an arch list reaches CUDA code
    assert doc["engines"] == {"sglang": ">=0.5.9,<0.5.10"}
    for w in ("ok check", "ok pending", "ok plan", "ok applied", f"wrote {Path('out') / 'widen-mod.toml'}"):
        assert w in out, out
    assert (root / "sglang/srt/layers/mod.py").read_bytes() == before  # the tree is never written
    # never over an existing file
    code, out, err = _run(run_cli, tmp_path, "--draft", "widen-mod", "--only", "3", "-o", "out")
    assert code == 2 and "already exists" in err and err.count("\n") == 1


def test_the_drafted_recipe_applies_and_opens_the_gates(tmp_path, run_cli):
    root = _tree(tmp_path)
    code, out, err = _run(run_cli, tmp_path, "--draft", "widen-mod", "--only", "2,3,5", "-o", "rec")
    assert code == 0, out + err
    code, out, err = run_cli("apply", "widen-mod", "--recipes", "rec", "-t", f"sglang={root}", cwd=tmp_path)
    assert code == 0, out + err
    code, out, _ = _run(run_cli, tmp_path, "--json")
    left = {(g["function"], g["condition"]) for g in json.loads(out)["trees"][0]["closed"]}
    assert ("fusion", "_is_sm90_supported or _is_sm100_supported") not in left
    assert not any(f == "resolve" for f, _ in left)
    code, out, err = run_cli("revert", "widen-mod", "--recipes", "rec", "-t", f"sglang={root}", cwd=tmp_path)
    assert code == 0, out + err
    assert (root / "sglang/srt/layers/mod.py").read_text() == MOD


@pytest.mark.parametrize(
    "gate,words",
    [
        ("flag", "it binds `_is_sm100_supported`, a flag named for a part"),
        ("family", "it is what `is_sm100_family` returns, a check named for a part"),
        ("excluded", "it shuts the device out by name"),
        ("excluded_ne", "it shuts the device out by name"),
        ("lone", "`is_sm100_supported()` is the whole condition of its `if`: no op kind adds an operand"),
        ("twice_a", "`x and is_sm100_supported()` stands 2 times in twice: a replace-expr would widen every one"),
    ],
)
def test_each_refusal_is_one_line_and_nothing_is_written(tmp_path, run_cli, gate, words):
    _tree(tmp_path)
    code, out, err = _run(run_cli, tmp_path, "--draft", "x", "--only", f"3,{N[gate]}", "-o", "out")
    assert code == 1, out + err
    line = next(ln for ln in err.splitlines() if ln.startswith(f"refused gate #{N[gate]} "))
    assert words in line, line
    assert "nothing was written (1 chosen gate(s) refused); --only 3 drafts the rest" in err
    assert not (tmp_path / "out").exists()


def test_refusals_without_an_analog_or_a_definition(tmp_path, run_cli):
    extra = {
        "sglang/srt/layers/other.py": (
            "from sglang.srt.utils import is_sm90_supported, is_sm100_supported\n"
            "from sglang.srt.platform import get_platform\n\n\n"
            "def f():\n"
            "    if get_device_capability()[0] >= 9 and get_device_capability()[0] < 12:\n"
            "        go()\n\n\n"
            "def g():\n"
            "    if is_sm90_supported() or is_sm100_supported():\n"
            "        go()\n"
        ),
        "sglang/srt/utils/common.py": UTILS.replace("def is_sm120_supported", "def is_sm12x"),
    }
    _tree(tmp_path, extra)
    code, out, _ = _run(run_cli, tmp_path, "--json")
    closed = {g["function"]: g["n"] for t in json.loads(out)["trees"] for g in t["closed"] if "other" in g["path"]}
    code, out, err = _run(run_cli, tmp_path, "--draft", "y", "--only", str(closed["g"]))
    assert code == 1
    assert (
        f"refused gate #{closed['g']} sglang/srt/layers/other.py:11 (is_sm90_supported() or is_sm100_supported()):"
        " `is_sm120_supported` is not defined in sglang.srt.utils of this tree" in err
    ), err
    code, out, err = _run(run_cli, tmp_path, "--json", "--draft", "y", "--only", str(closed["f"]))
    assert code == 1
    doc = json.loads(out)
    assert doc["written"] is False and doc["ops"] == [] and doc["refused"][0]["n"] == closed["f"]
    assert doc["refused"][0]["why"] == (
        "`get_device_capability()[0] < 12` names no part (10.0) that an analog for 12.0 could be made of: write the"
        " operand by hand"
    )


@pytest.mark.skipif(not cppeval.available(), reason="tree-sitter-cpp not installed")
def test_cuda_arch_guards_drop_the_exclusion_or_gain_the_analog(tmp_path, run_cli):
    cuh = (
        "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))\n"
        "  sync();\n#endif\n"
        "#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL)\n"
        "  tcgen05();\n#endif\n"
        "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 1200 \\\n    && __CUDA_ARCH__ >= 900\n  x();\n#endif\n"
    )
    _tree(tmp_path, {"sglang/srt/kernels/k.cuh": cuh})
    code, out, _ = _run(run_cli, tmp_path, "--json")
    got = {g["line"]: g["n"] for t in json.loads(out)["trees"] for g in t["closed"] if g["path"].endswith(".cuh")}
    code, out, err = _run(run_cli, tmp_path, "--draft", "k", "--only", f"{got[1]},{got[4]}", "-o", "o")
    assert code == 0, out + err
    hunks = [o["params"]["hunk"] for o in tomllib.loads((tmp_path / "o" / "k.toml").read_text())["ops"]]
    assert any("+#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))\n" in h for h in hunks), hunks
    assert any(
        "+#if defined(__CUDA_ARCH_FEAT_SM100_ALL) || defined(__CUDA_ARCH_FEAT_SM103_ALL)"
        " || defined(__CUDA_ARCH_FEAT_SM120_ALL)\n" in h
        for h in hunks
    ), hunks
    code, out, err = _run(run_cli, tmp_path, "--draft", "k2", "--only", str(got[7]))
    assert code == 1 and "an #if continued over several lines" in err, err


def test_drafting_more_gates_than_a_person_reads_needs_only(tmp_path, run_cli):
    many = "".join(f"def f{i}(x):\n    return x or is_sm100_supported()\n\n\n" for i in range(90))
    _tree(tmp_path, {"sglang/srt/many.py": many})  # 105 closed gates: more than one drafts unseen
    code, out, err = _run(run_cli, tmp_path, "--draft", "x", "--jobs", "1")
    assert code == 2 and "105 gates are closed; a recipe widens the ones you choose" in err, err


def test_bad_input(tmp_path, run_cli):
    _tree(tmp_path)
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "widen.toml").write_text(gate_recipe())
    for args, words in [
        (["--draft", "x", "--only", "99"], "no gate #99 (the scan numbers its closed gates 1 to 15)"),
        (["--draft", "x", "--only", "a"], "is not a gate number nor FILE:LINE"),
        (["--draft", "Bad Id"], "is not a valid recipe id"),
        (["--only", "3"], "--only and --out go with --draft ID"),
        (["--across", "sglang==0.5.9..0.5.10", "--draft", "x"], "--draft drafts from the trees one scan reads"),
        (["--draft", "widen", "--recipes", str(tmp_path / "rec"), "--only", "3", "-o", "o"], "is already a recipe in"),
    ]:
        code, out, err = _run(run_cli, tmp_path, *args)
        assert code == 2, (args, out, err)
        assert words in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_an_activated_serving_venv_is_the_default_tree(tmp_path, run_cli, monkeypatch):
    venv = tmp_path / "serve"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    mini_sglang(site, {"sglang/srt/a.py": "from x import is_sm100_supported\nif is_sm100_supported():\n    go()\n"})
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    code, out, err = run_cli("gates", "--device", "12.0", cwd=tmp_path)
    assert err.splitlines()[0] == (
        f"patchkit: --python {venv}/bin/python: the activated venv ($VIRTUAL_ENV); -t or --python names another"
    )
    assert code == 1 and f"at {site}" in out and "sglang/srt/a.py" in out, out + err
    other = mini_sglang(tmp_path / "other", {})
    code, out, err = run_cli("gates", "--device", "12.0", "-t", f"sglang={other}", cwd=tmp_path)
    assert code == 0 and "activated venv" not in err and str(venv) not in out


def _draft(tmp_path, only: list[int]):
    """A draft of the tree's gates ``only``, made in process (patchkit/authoring/draft.py)."""
    from patchkit.authoring import draft as D
    from patchkit.base.target import open_target
    from patchkit.core.goals.device import Device
    from patchkit.upstream import gates as G

    dev, cmp_ = Device.parse("12.0"), Device.parse("10.0")
    t = open_target("sglang", tmp_path / "sg")
    res = G.scan("sglang", t.root, t.layout, t.version, dev, cmp_, jobs=1)
    chosen = [x for x in D.numbered([(res, 0.0)]) if x.n in only]
    return D.make("widen-mod", chosen, {"sglang": t}, dev, cmp_), {"sglang": t}


def test_the_proof_refuses_a_draft_that_does_not_hold(tmp_path):
    from patchkit.authoring import draft as D

    _tree(tmp_path)
    d, targets = _draft(tmp_path, [N["resolve"]])
    assert [ok for _, ok, _ in D.prove(d, targets)] == [True, True, True, True]
    good = d.text
    d.text = good.replace('kind = "or-operand"', 'kind = "or-operandx"')  # check: the recipe does not validate
    (check,) = D.prove(d, targets)
    assert check[:2] == ("check", False) and "or-operandx" in check[2]
    d.text = good.replace("operands = ['is_sm90_supported()'", "operands = ['is_sm80_supported()'")
    checks = D.prove(d, targets)  # pending: the op does not read pending on the tree
    assert checks[-1][:2] == ("pending", False) and "op #2 (or-operand" in checks[-1][2] and "missing" in checks[-1][2]
    d.text = good
    d.files[0].new = d.files[0].new.replace(b"raise ValueError", b"raise RuntimeError")
    checks = D.prove(d, targets)  # plan: the planner's bytes are not the drafted edit
    assert checks[-1] == (
        "plan",
        False,
        "sglang:sglang/srt/layers/mod.py: the planner's bytes are not the drafted edit",
    )


def test_overlapping_edits_are_told():
    from patchkit.authoring.draft_ops import _overlap

    assert _overlap([(0, 5, b"x"), (3, 8, b"y")])
    assert not _overlap([(0, 5, b"x"), (5, 5, b"y"), (6, 9, b"z")])


def test_refusals_of_names_the_draft_cannot_bind(tmp_path, run_cli):
    extra = {
        "sglang/srt/layers/names.py": (
            "from .common import is_sm100_supported\n\n"
            "SM90, SM100 = 90, 100\n\n\n"
            "def relative():\n"
            "    if is_sm100_supported() or x:\n"
            "        go()\n\n\n"
            "def named():\n"
            "    return build(sm_list=[SM90, SM100])\n"
        ),
    }
    _tree(tmp_path, extra)
    code, out, _ = _run(run_cli, tmp_path, "--json")
    n = {g["function"]: g["n"] for t in json.loads(out)["trees"] for g in t["closed"] if "names" in g["path"]}
    assert set(n) == {"relative", "named"}, n
    code, out, _ = _run(run_cli, tmp_path, "--json", "--draft", "z", "--only", ",".join(map(str, n.values())))
    assert code == 1
    why = {r["n"]: r["why"] for r in json.loads(out)["refused"]}
    assert why[n["relative"]].startswith("`from .common import is_sm100_supported` is a relative import")
    assert why[n["named"]] == "a list of names or mixed elements: add the device by hand"


def test_a_gate_a_recipe_in_play_already_widens_is_refused(tmp_path, run_cli):
    _tree(tmp_path)
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "fusion.toml").write_text(
        'id = "fusion"\nsummary = "s"\n[engines]\nsglang = ">=0.5.9"\n[[ops]]\nkind = "or-operand"\n'
        'engine = "sglang"\nfile = "sglang/srt/layers/mod.py"\nscope = "fusion"\n'
        '[ops.locator]\noperands = ["_is_sm90_supported", "_is_sm100_supported"]\n'
        '[ops.params]\noperand = "_is_sm120_supported"\n'
    )
    code, out, err = _run(
        run_cli, tmp_path, "--recipes", "rec", "--draft", "x", "--only", f"{N['fusion']},3", "-o", "o"
    )
    assert code == 1
    assert (
        f"refused gate #{N['fusion']} sglang/srt/layers/mod.py:10 (_is_sm90_supported or _is_sm100_supported):"
        " fusion (in play) already edits it: apply that recipe instead" in err
    ), err


HOOK = """\
from sglang.srt.runtime_context import get_platform


def hook(cfg):
    if (
        cfg.x == "a"
        and not get_platform().is_sm100
        and cfg.y > 1
    ):
        go()
    if (
        cfg.q
        and get_platform().is_sm100
        and cfg.z
    ):
        go2()
    use = (
        get_platform().is_sm90
        or get_platform().is_sm100
    )
    return use
"""


def test_multi_line_chains_keep_their_layout(tmp_path, run_cli):
    """An operand added to a chain written one operand a line goes on its own line, as the op
    writes it; a check inside such an `and` is widened by a replace-expr of the whole chain."""
    root = mini_sglang(tmp_path / "sg", {"sglang/srt/hook.py": HOOK})
    code, out, err = _run(run_cli, tmp_path, "--draft", "h", "--only", "1-3", "-o", "o")
    assert code == 0, out + err
    ops = tomllib.loads((tmp_path / "o" / "h.toml").read_text())["ops"]
    assert [o["kind"] for o in ops] == ["and-operand", "replace-expr", "or-operand"]
    assert ops[1]["locator"]["match"].split() == ["(", "cfg.q", "and", "get_platform().is_sm100", "and", "cfg.z", ")"]
    code, out, err = run_cli("apply", "h", "--recipes", "o", "-t", f"sglang={root}", cwd=tmp_path)
    assert code == 0, out + err
    text = (root / "sglang/srt/hook.py").read_text()
    assert "        and not get_platform().is_sm100\n        and not get_platform().is_sm120\n" in text
    assert "        and (get_platform().is_sm100 or get_platform().is_sm120)\n" in text
    assert "        or get_platform().is_sm100\n        or get_platform().is_sm120\n" in text


def test_membership_lists_and_capability_arguments(tmp_path, run_cli):
    """`major in (9, 10)` gains the device as a list-element; a check that takes a capability
    (vLLM's `is_device_capability_family(100)`) has the device's as its analog's argument."""
    root = tmp_path / "vllm"
    files = {
        "vllm/__init__.py": "",
        "vllm/_version.py": "__version__ = version = '0.33.0'\n",
        "vllm/attn.py": (
            "from vllm.platforms import current_platform\n\n\n"
            "def pick(x, major):\n"
            "    if x and current_platform.get_device_capability()[0] in (9, 10):\n"
            "        return 1\n"
            "    if x and current_platform.is_device_capability_family(100):\n"
            "        return 2\n"
            "    return 0\n"
        ),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    code, out, err = run_cli("gates", "--device", "12.0", "-t", f"vllm={root}", "--draft", "v", "-o", "o", cwd=tmp_path)
    assert code == 0, out + err
    ops = tomllib.loads((tmp_path / "o" / "v.toml").read_text())["ops"]
    assert [(o["kind"], o["params"]) for o in ops] == [
        ("list-element", {"element": "12"}),
        (
            "replace-expr",
            {"with": "x and (current_platform.is_device_capability_family(100) or "
             "current_platform.is_device_capability_family(120))"},
        ),
    ]  # fmt: skip


@pytest.mark.skipif(not cppeval.available(), reason="tree-sitter-cpp not installed")
def test_a_runtime_cpp_check_is_refused_as_one(tmp_path, run_cli):
    cu = (
        "void check(int dev) {\n  int major = 0;\n"
        "  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);\n"
        '  TORCH_CHECK(major == 10, "SM100 only");\n}\n'
    )
    _tree(tmp_path, {"sglang/srt/kernels/k.cu": cu})
    code, out, _ = _run(run_cli, tmp_path, "--json")
    got = [g for t in json.loads(out)["trees"] for g in t["closed"] if g["path"].endswith(".cu")]
    assert [(g["line"], g["kind"], g["condition"]) for g in got] == [(4, "check", "major == 10")]
    code, out, err = _run(run_cli, tmp_path, "--draft", "k", "--only", str(got[0]["n"]))
    assert code == 1 and "a run-time C++ check: no op kind widens one yet" in err, err
    assert not (tmp_path / "recipes" / "k.toml").exists()
