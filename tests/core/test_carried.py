"""A Python op's site identity carried in its recipe (``[ops.identity]``, patchkit/core/carried.py):
written by `capture` and `port`, validated by recipe.py, preferred by identity.py to one
derived from a release, and judged exactly as the derived one is."""

from __future__ import annotations

import ast
import dataclasses
import sys
from pathlib import Path

import pytest

from patchkit.core import carried, context, identity
from patchkit.upstream.pristine import RELEASES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# Every kind of statement a block can hold, for the round trip of its text and head.
MODULE = '''
import os
from sglang.srt import utils as u
from sglang.srt.layers.x import (a, b)


@decorated
async def fetch(url, *args, retries: int = 3, **kw):
    """Doc."""
    x = y = 1
    self.total: int = 0
    self.count += 1
    f(x)
    self.log.info("hi %s", x)
    await g()
    del x
    assert x, "why"
    global G
    if x:
        pass
    elif y:
        return None
    for i in range(3):
        continue
    while False:
        break
    with open(p) as fh, lock:
        raise ValueError("no")
    try:
        lambda: 0
    except (KeyError, OSError) as e:
        x = [i for i in e.args if i]
    finally:
        return {**kw, "a": 1}
    match x:
        case 1:
            pass


class Args(Base, metaclass=Meta):
    field: int = None
    nested = {"k": [1, 2, (3,)]}
'''


def _all_statements(tree):
    return [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]


def test_a_statements_head_is_read_back_from_its_text():
    for s in _all_statements(ast.parse(MODULE)):
        text, head = context.stmt(s)
        assert carried.head_of(text) == head, (text, head)


def test_a_table_builds_back_into_the_same_contexts():
    tree = ast.parse(MODULE)
    imports = context.imports_of(tree, "sglang/srt/m.py")
    sites = tuple(
        context.of_site(tree, ln, "sglang/srt/m.py", "fetch", imports)
        for ln in (MODULE.splitlines().index("    self.count += 1") + 1, MODULE.splitlines().index("    del x") + 1)
    )
    ident = identity.Identity("sglang 0.5.9", sites)
    tab = carried.table(ident.release, ident.sites, "sglang")
    assert "os" not in tab["imports"] and "sglang.srt:utils" in tab["imports"]  # the engine's own only
    assert "sglang.srt.utils" not in tab["imports"]  # implied by `from sglang.srt import utils`
    back = carried.build(tab["release"], "sglang/srt/m.py", "fetch", tab["imports"], tab["sites"])
    own = frozenset(p for p in imports if p[0].startswith("sglang"))
    assert back == ("sglang 0.5.9", tuple(dataclasses.replace(c, imports=own) for c in sites))
    # The TOML port and capture write reads back as the same table.
    from patchkit.authoring.hunks import toml_str

    lines = carried.toml_lines("ops", tab, toml_str)
    assert tomllib.loads("[[ops]]\n" + "\n".join(lines))["ops"][0]["identity"] == tab


# -- capture writes it -----------------------------------------------------------------------------


def test_capture_writes_each_python_ops_site_and_identity_prefers_it(tmp_path, run_cli, monkeypatch):
    from tests.authoring.test_capture import MOD, PRISTINE, _edit
    from tests.conftest import git

    repo = tmp_path / "sglang"
    for rel, text in {
        "python/sglang/__init__.py": "",
        "python/sglang/version.py": '__version__ = "0.5.9"\n',
        **PRISTINE,
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "v0.5.9")
    git(repo, "tag", "v0.5.9")
    _edit(repo, MOD, "major in [9, 10]", "major in [9, 10, 12]")
    _edit(repo, MOD, "# keep going", "# keep on going")
    out = tmp_path / "out" / "mine.toml"
    code, _, err = run_cli("capture", "mine", "-t", f"sglang={repo}", "--out", str(out), cwd=tmp_path)
    assert code == 0, err
    py, text_op = tomllib.loads(out.read_text())["ops"]
    assert py["identity"] == {
        "release": "sglang 0.5.9",
        "imports": [],  # the file imports is_a and is_b; the site's lines name neither (capture.compact)
        "sites": [
            {
                "enclosing": ["check"],
                "params": "major",
                "block": ["return major in [9, 10]"],
                "at": 1,
                # the context lines across the blocks around the site (the `if` holding it, then
                # the method's next statements), as a diff shows them
                "before": ["if _A or _B"],
                "after": ["backends = ['trtllm', 'mxfp4']", "return backends"],
                "arms": ["if _A or _B"],  # the if around it, its arm (folds.py)
            }
        ],
    }
    assert text_op["kind"] == "text-hunk" and "identity" not in text_op  # its context lines are its identity

    # Loaded, the op's identity is the carried one: no release is read for it.
    from patchkit.core.recipe import load_recipe

    op = load_recipe(out).ops[0]
    monkeypatch.setattr(identity, "_homes", lambda *a: pytest.fail("a carried identity reads no release"))
    got = identity.of(None, None, op)
    assert got.release == "sglang 0.5.9" and got.sites[0].block == (("return major in [9, 10]", ""),)


# -- real releases: carried judges as derived --------------------------------------------------------


@pytest.mark.real
def test_a_carried_identity_judges_as_the_derived_one_on_real_releases():
    """The SGLang half of allreduce-fusion as written for 0.5.9-0.5.13, judged on 0.5.9
    (pending), 0.5.15 and 0.5.22 (communicator.py's gate moved to add_norm.py; the flag is
    gone): once with identities derived from 0.5.9, once with the same identities carried in
    the recipe as port and capture write them.  Every verdict, place, message and candidate
    score is the same."""
    from patchkit.authoring.port import _flat, op_toml, raw_ops
    from patchkit.base.target import open_target
    from patchkit.core.judge import evaluate
    from patchkit.core.recipe import load_recipe
    from patchkit.core.session import Session
    from patchkit.upstream.drift import release_tree
    from tests.authoring.test_port import GATE_ONLY

    def load(text: str, where: Path):
        where.mkdir(parents=True, exist_ok=True)
        (where / "old-gate.toml").write_text(text)
        return load_recipe(where / "old-gate.toml")

    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="carried-"))
    derived = load(GATE_ONLY, tmp / "derived")
    home = Session({"sglang": open_target("sglang", release_tree("sglang", "0.5.9"))}, releases=RELEASES)
    head = GATE_ONLY.split("[[ops]]", 1)[0]
    blocks = []
    for n, (raw, _) in raw_ops(tomllib.loads(GATE_ONLY)).items():
        op = derived.ops[n - 1]
        ident = identity.of(home, derived, op) if op.impl.RELOCATABLE else None
        if ident is not None:
            raw = {**raw, "identity": carried.table(ident.release, ident.sites, "sglang")}
        blocks.append("\n".join(op_toml(raw, "ops", raw["file"], raw.get("scope", ""))))
    text = head + "\n\n".join(blocks) + "\n"
    assert text.count("[ops.identity]") == 2  # the flag and the gate; an import carries none
    carrying = load(text, tmp / "carried")
    assert [op.identity is not None for op in carrying.ops] == [False, True, True]
    # Blocks within MAX_BLOCK: written whole, so the claim is exact equality.
    assert all(len(c.block) <= carried.MAX_BLOCK for op in carrying.ops if op.identity for c in op.identity[1])

    def verdicts(recipe, version: str) -> list:
        tree = open_target("sglang", release_tree("sglang", version))
        flat = _flat(recipe, "sglang", list(recipe.ops), version)
        ((_, evs),) = evaluate(Session({"sglang": tree}, releases=RELEASES), [flat])
        return [(str(ev.state), ev.location(), ev.line, ev.message, [c.to_json() for c in ev.candidates]) for ev in evs]

    seen = set()
    for version in ("0.5.9", "0.5.15", "0.5.22"):
        want = verdicts(derived, version)
        assert verdicts(carrying, version) == want, version
        seen |= {w[0] for w in want}
    assert {"pending", "moved"} <= seen, seen  # the identity decided something


def test_a_long_block_is_written_as_the_statements_around_its_site():
    fields = "".join(f"    f{i}: int = {i}\n" for i in range(400))
    tree = ast.parse(f"class Args:\n{fields}")
    site = context.of_site(tree, 2 + 300, "sglang/srt/a.py", "Args")  # f300
    (s,) = carried.table("sglang 0.5.9", (site,), "sglang")["sites"]
    assert len(s["block"]) == carried.MAX_BLOCK and s["block"][s["at"] - 1] == "f300: int = 300"
    assert s["block"][0] == f"f{300 - carried.MAX_BLOCK // 2}: int = {300 - carried.MAX_BLOCK // 2}"
    end = context.of_site(tree, 2 + 399, "sglang/srt/a.py", "Args")  # the last: the window ends with it
    (s,) = carried.table("sglang 0.5.9", (end,), "sglang")["sites"]
    assert s["at"] == carried.MAX_BLOCK and s["block"][-1] == "f399: int = 399"


def test_carried_context_lines_are_as_many_as_the_judge_reads():
    from patchkit.core import carried, context

    assert carried.NEAR == context.NEAR
