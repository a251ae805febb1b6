"""Engines as data (patchkit/base/engines.toml, engines/*.toml beside the recipes): the shipped
definitions, a user's own engine with no code change, strict errors, no engine named in
code, and vLLM's layouts and sdist reference on miniature trees (offline)."""

from __future__ import annotations

import ast
import io
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from patchkit.base import journal
from patchkit.base.engines import ENGINES, EngineError, parse
from patchkit.base.target import open_target
from tests.conftest import ROOT, downloaded

# Modules allowed to name an engine: FlashInfer's nvcc build model (its flags and the
# third-party include dirs of its wheel), reached only through the definition's `jit` table.
ALLOWED = {"patchkit/verify/build.py"}


def _engine_words() -> re.Pattern:
    names = set()
    for i in ENGINES.values():
        names |= {i.name, i.package, i.dist, i.dist.replace("-", "_")}
    return re.compile(r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b", re.I)


def test_no_module_names_an_engine_outside_the_definitions():
    """Code that keys on an engine: an identifier, or a string with no blank (a name, a key,
    a path) that names one.  Sentences (messages, help, their e.g. examples) and
    docstrings may mention engines; the definitions live in engines.toml."""
    word = _engine_words()
    hits = []
    for p in sorted((ROOT / "patchkit").rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        tree = ast.parse(p.read_text())
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                s = n.value if not any(c.isspace() for c in n.value) else ""
            else:
                s = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else ""
            if s and word.search(s):
                hits.append(f"{rel}:{n.lineno}: {s!r}")
    assert hits == []


def test_the_check_fires_on_code_that_names_an_engine(tmp_path):
    word = _engine_words()
    assert word.search('if t.engine == "flashinfer":'.split("==")[1].strip().strip('"'))
    assert word.search("vllm") and word.search("flashinfer_python") and not word.search("sglangx")


def test_the_shipped_engines():
    assert list(ENGINES)[:3] == ["sglang", "flashinfer", "vllm"]
    v = ENGINES["vllm"]
    assert (v.dist, v.package, v.reference, v.git_marker) == ("vllm", "vllm", "sdist", "csrc")
    assert dict(v.layouts["package"]) == {"vllm/": "vllm/"}
    assert ENGINES["flashinfer"].layouts["package"][1] == ("include/", "flashinfer/data/include/")
    assert ENGINES.with_jit().name == "flashinfer"


USER_ENGINE = """\
[tinyeng]
dist = "tiny-eng"
package = "tiny"
reference = "git"
git_marker = "src/tiny"
[tinyeng.layouts]
git = [["tiny/", "src/tiny/"]]
package = [["tiny/", "tiny/"]]
"""

USER_RECIPE = """\
id = "tiny-gate"
summary = "admit 12 to tiny's gate"
bundles = ["t"]

[engines]
tinyeng = ">=1.0"

[[ops]]
kind = "list-element"
engine = "tinyeng"
file = "tiny/gate.py"
scope = "ok"
[ops.locator]
contains = ["9", "10"]
[ops.params]
element = "12"
"""


@pytest.fixture
def user_engine(tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINES, "_d", dict(ENGINES._all()))  # the user's engine stays in this test
    monkeypatch.setattr(ENGINES, "_dirs", set())
    rec = tmp_path / "recipes"
    (rec / "engines").mkdir(parents=True)
    (rec / "engines" / "tinyeng.toml").write_text(USER_ENGINE)
    (rec / "tiny-gate.toml").write_text(USER_RECIPE)
    return rec


def test_a_user_adds_an_engine_without_code(user_engine, tmp_path, run_cli):
    tree = tmp_path / "checkout"
    (tree / "src" / "tiny").mkdir(parents=True)
    (tree / "src" / "tiny" / "__init__.py").write_text("")
    (tree / "src" / "tiny" / "version.py").write_text('__version__ = "1.2"\n')
    (tree / "src" / "tiny" / "gate.py").write_text("def ok(major):\n    return major in [9, 10]\n")
    pre = ["--recipes", str(user_engine)]
    code, out, err = run_cli(*pre, "check")
    assert code == 0, err
    code, out, err = run_cli(*pre, "apply", "tiny-gate", "-t", f"tinyeng={tree}")
    assert code == 0, err
    assert (tree / "src/tiny/gate.py").read_text() == "def ok(major):\n    return major in [9, 10, 12]\n"
    assert open_target("tinyeng", tree).describe().startswith("tinyeng 1.2 (git layout)")
    code, out, err = run_cli(*pre, "status", "tiny-gate", "-t", f"tinyeng={tree}", "--json")
    assert json.loads(out)["recipes"][0]["state"] == "applied", err
    code, out, err = run_cli(*pre, "revert", "tiny-gate", "-t", f"tinyeng={tree}")
    assert code == 0 and (tree / "src/tiny/gate.py").read_text().endswith("[9, 10]\n"), err
    code, out, err = run_cli(*pre, "new", "x", "--engine", "tinyeng", "-o", "-")
    assert code == 0 and 'engine = "tinyeng"' in out, err
    code, out, err = run_cli(*pre, "new", "x", "--engine", "tgi", "-o", "-")
    assert (code, out) == (2, "") and err == (
        "patchkit: error: --engine 'tgi': unknown engine (hint: engines: sglang, flashinfer, vllm, tinyeng)\n"
    )


@pytest.mark.parametrize(
    "text,line,message",
    [
        (
            USER_ENGINE.replace('git_marker = "src/tiny"\n', 'git_marker = "src/tiny"\nbogus = 1\n'),
            6,
            "[tinyeng] bogus: unknown key 'bogus'",
        ),
        (USER_ENGINE.replace('reference = "git"', 'reference = "cvs"'), 4, "[tinyeng] reference: 'cvs' is not"),
        (USER_ENGINE.replace('dist = "tiny-eng"\n', ""), 1, "[tinyeng]: no dist"),
        (USER_ENGINE.replace('package = [["tiny/", "tiny/"]]', 'package = [["../x", "x"]]'), 6, "leads outside"),
        (USER_ENGINE.replace("[tinyeng]", "[sglang]").replace("tinyeng.", "sglang."), 1, "'sglang' is defined twice"),
        ("[tinyeng\n", 1, "not valid TOML"),
        # names that become path components of the cache must stay one component
        (USER_ENGINE.replace('dist = "tiny-eng"', 'dist = "../../x"'), 2, "[tinyeng] dist: '../../x' is not a package"),
        (USER_ENGINE.replace('dist = "tiny-eng"', 'dist = ".."'), 2, "[tinyeng] dist: '..' is not a package-index"),
        (USER_ENGINE.replace('dist = "tiny-eng"', 'dist = "a/b"'), 2, "[tinyeng] dist: 'a/b' is not a package-index"),
        (USER_ENGINE.replace('git_marker = "src/tiny"', 'git_marker = "../x"'), 5, "git_marker: '../x' leads outside"),
        (USER_ENGINE + '[tinyeng.jit]\nprebuilt = "../p"\n', 9, "[tinyeng] jit: jit.prebuilt '../p' is not a"),
        (USER_ENGINE + '[tinyeng.jit]\ncache = "/etc"\n', 9, "[tinyeng] jit: jit.cache '/etc' leads outside"),
        (USER_ENGINE + '[tinyeng.jit]\ncache = "a/../../b"\n', 9, "jit.cache 'a/../../b' leads outside"),
        (USER_ENGINE + '[tinyeng.jit]\ncache_env = "A B"\n', 9, "jit.cache_env 'A B' is not an environment"),
    ],
)
def test_a_bad_definition_is_one_line_with_file_and_line(user_engine, run_cli, text, line, message):
    path = user_engine / "engines" / "tinyeng.toml"
    path.write_text(text)
    code, out, err = run_cli("--recipes", str(user_engine), "list")
    assert code == 2 and out == ""
    assert err.startswith(f"patchkit: error: {path}:{line}: ") and message in err, err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(EngineError):
        parse(text, str(path), tuple(ENGINES))


# -- vLLM on miniature trees ------------------------------------------------------------------

GATE = """def enable_allreduce_rms_fusion(cfg):
    return cfg.tp > 1 and (
        current_platform.is_device_capability_family(100)
        or current_platform.is_device_capability(90)
    )
"""


def _vllm_sdist(cache: Path, version: str) -> None:
    d = cache / "sdists" / "vllm" / version
    d.mkdir(parents=True)
    with tarfile.open(d / f"vllm-{version}.tar.gz", "w:gz") as tar:
        for rel, text in {
            "PKG-INFO": f"Name: vllm\nVersion: {version}\n",
            "setup.py": "",
            "vllm/__init__.py": "",
            "vllm/_version.py": f"__version__ = version = '{version}'\n",
            "vllm/config/vllm.py": GATE,
            "csrc/k.cu": "// kernel\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    downloaded(d / f"vllm-{version}.tar.gz", cache)


def test_vllm_in_every_layout_with_its_sdist_as_the_reference(tmp_path, monkeypatch, run_cli):
    cache = tmp_path / "cache"
    _vllm_sdist(cache, "0.33.0")
    monkeypatch.setenv("PATCHKIT_CACHE", str(cache))
    monkeypatch.delenv("PATCHKIT_OFFLINE", raising=False)  # cached: the index is never asked
    sp = tmp_path / "site-packages"
    (sp / "vllm" / "config").mkdir(parents=True)
    (sp / "vllm" / "__init__.py").write_text("")
    (sp / "vllm" / "config" / "vllm.py").write_text(GATE)
    (sp / "vllm-0.33.0.dist-info").mkdir()
    (sp / "vllm-0.33.0.dist-info" / "METADATA").write_text("Name: vllm\nVersion: 0.33.0\n")
    assert open_target("vllm", sp).layout == "package"
    rec = ROOT / "recipes"
    code, out, err = run_cli("--recipes", str(rec), "check")
    assert code == 0 and "unknown engine" not in out + err, out + err
    t = ["-t", f"vllm={sp}"]
    code, _, err = run_cli("--recipes", str(rec), "apply", "vllm-allreduce-fusion", *t)
    assert code == 0, err
    assert "or current_platform.is_device_capability_family(120)" in (sp / "vllm/config/vllm.py").read_text()
    (sp / ".patchkit" / "journal.json").unlink()  # lost, and its mirror too: nothing proves the edit
    journal.mirror_path(sp).unlink()
    code, out, err = run_cli("--recipes", str(rec), "status", "vllm-allreduce-fusion", *t, "--json")
    op = json.loads(out)["recipes"][0]["ops"][0]
    assert op["state"] == "someone-else" and "vllm 0.33.0's sdist does not have it" in json.dumps(op), out
    code, _, err = run_cli("--recipes", str(rec), "revert", "vllm-allreduce-fusion", *t)
    assert (
        code == 1 and "or current_platform.is_device_capability_family(120)" in (sp / "vllm/config/vllm.py").read_text()
    )
    code, _, err = run_cli("--recipes", str(rec), "adopt", "vllm-allreduce-fusion", *t)
    assert code == 0, err
    code, _, err = run_cli("--recipes", str(rec), "revert", "vllm-allreduce-fusion", *t)
    assert code == 0 and (sp / "vllm/config/vllm.py").read_text() == GATE, err
    # The unpacked sdist is a git layout (csrc/ beside vllm/); its reference is itself.
    tree = cache / "trees" / "vllm-0.33.0"
    assert sorted(p.name for p in tree.iterdir()) == [".patchkit", "PKG-INFO", "csrc", "vllm"]
    assert open_target("vllm", tree).layout == "git"
    code, out, err = run_cli("--recipes", str(rec), "drift", "vllm-allreduce-fusion", "--to", f"vllm={tree}")
    assert code == 0 and "#1 or-operand     pending   vllm/config/vllm.py:2" in out, out + err


def test_an_sdist_member_that_leads_outside_is_refused(tmp_path):
    from patchkit.base.errors import FetchError
    from patchkit.upstream import fetch

    sd = tmp_path / "x-1.tar.gz"
    with tarfile.open(sd, "w:gz") as tar:
        info = tarfile.TarInfo("x-1/vllm/../../evil.py")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(FetchError, match="leads outside the tree"):
        fetch.unpack_sdist(sd, tmp_path / "out", ("vllm/",), {})
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.py").exists()


def test_with_no_recipe_named_the_recipes_of_an_engine_with_no_tree_are_left_out(tmp_path, run_cli):
    """A SGLang venv has no vLLM: a bare `status` judges the SGLang recipes and names the
    vLLM one it leaves out; named, the vLLM recipe is an error that says what is missing."""
    sp = tmp_path / "sp"
    (sp / "sglang" / "srt").mkdir(parents=True)
    (sp / "sglang" / "__init__.py").write_text("")
    (sp / "sglang" / "version.py").write_text('__version__ = "0.5.9"\n')
    (sp / "sglang" / "srt" / "x.py").write_text('def f():\n    return ["a"]\n')
    rec = tmp_path / "recipes"
    rec.mkdir()
    (rec / "a.toml").write_text(
        (ROOT / "tests" / "conftest.py").read_text().split('MINIMAL_RECIPE = """\\\n')[1].split('"""')[0].format(id="a")
    )
    shutil.copy(ROOT / "recipes" / "vllm-allreduce-fusion.toml", rec)
    code, out, err = run_cli("--recipes", str(rec), "status", "-t", f"sglang={sp}", cwd=tmp_path)
    assert code == 1 and "a                        pending" in out, out + err
    assert err == (
        "note: vllm-allreduce-fusion not judged: it edits vllm, which has no tree here (name it to be told why)\n"
    )
    code, out, err = run_cli("--recipes", str(rec), "status", "vllm-allreduce-fusion", "-t", f"sglang={sp}")
    assert code == 2 and "recipe vllm-allreduce-fusion edits vllm, but there is no vllm target" in err


@pytest.fixture
def vllm_index(tmp_path, monkeypatch):
    """A file: simple index of `vllm`: 0.32.0 and 0.33.0 with an sdist and a wheel, 0.31.0
    with a wheel only (as a release may have), in an empty cache."""
    import zipfile

    files = tmp_path / "files"
    files.mkdir()
    links = []
    for v in ("0.31.0", "0.32.0", "0.33.0"):
        whl = files / f"vllm-{v}-cp38-abi3-manylinux1_x86_64.whl"
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr("vllm/__init__.py", "")
            z.writestr("vllm/config/vllm.py", GATE)
            z.writestr(f"vllm-{v}.dist-info/METADATA", f"Name: vllm\nVersion: {v}\n")
        whl.write_bytes(buf.getvalue())
        made = [whl]
        if v != "0.31.0":
            cache = tmp_path / "mk"
            _vllm_sdist(cache, v)
            sd = files / f"vllm-{v}.tar.gz"
            sd.write_bytes((cache / "sdists" / "vllm" / v / sd.name).read_bytes())
            made.append(sd)
        links += made
    return _serve_index(tmp_path, monkeypatch, "vllm", links)


def _serve_index(tmp_path: Path, monkeypatch, dist: str, files: list[Path]) -> Path:
    """A file: simple index at tmp_path/simple listing ``files`` (with their sha256) as
    ``dist``'s, and an empty cache at tmp_path/cache, online."""
    import hashlib

    links = [
        f'<a href="../../files/{f.name}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">{f.name}</a><br/>'
        for f in files
    ]
    page = tmp_path / "simple" / dist
    page.mkdir(parents=True)
    (page / "index.html").write_text("<html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    monkeypatch.setenv("PATCHKIT_INDEX_URL", (tmp_path / "simple").as_uri())
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PATCHKIT_OFFLINE", raising=False)
    return tmp_path


def test_a_vllm_release_comes_from_its_sdist_and_from_its_wheel_only_without_one(vllm_index):
    from patchkit.base.errors import FetchError
    from patchkit.upstream import drift, fetch

    said: list[str] = []
    tree = drift.release_tree("vllm", "0.33.0", say=said.append)
    cached = vllm_index / "cache" / "sdists" / "vllm" / "0.33.0" / "vllm-0.33.0.tar.gz"
    assert said == [
        "downloading vllm==0.33.0 from the package index (vllm-0.33.0.tar.gz) ...",
        f"cached {cached}",
        "unpacking vllm-0.33.0.tar.gz (vllm/, csrc/, cmake/, CMakeLists.txt) ...",
    ]
    assert open_target("vllm", tree).layout == "git" and (tree / "csrc/k.cu").is_file()
    assert not (tree / "setup.py").exists()  # only the layout's prefixes (and PKG-INFO)
    assert not (vllm_index / "cache" / "wheels").exists()  # no wheel was fetched
    said.clear()
    tree = drift.release_tree("vllm", "0.31.0", say=said.append)
    assert said[0] == "vllm 0.31.0: no sdist on the index; its wheel will do"
    assert open_target("vllm", tree).layout == "package"
    assert drift.versions_between("vllm", "0.31.0", "0.33.0") == ["0.31.0", "0.32.0", "0.33.0"]
    # A tampered sdist is refused, as a wheel is.
    (vllm_index / "files" / "vllm-0.32.0.tar.gz").write_bytes(b"tampered")
    with pytest.raises(FetchError, match="vllm-0.32.0.tar.gz: sha256 mismatch: the index lists"):
        fetch.fetch_sdist("vllm", "0.32.0")
    assert not any((vllm_index / "cache" / "sdists" / "vllm" / "0.32.0").iterdir())


def test_a_planted_cache_entry_with_a_dist_leading_outside_is_a_miss(tmp_path, monkeypatch):
    """The shipped table's cached JSON is read back only if each dist is one path component."""
    from patchkit.base import engines

    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    assert engines._shipped()["sglang"].dist == "sglang"
    (entry,) = (tmp_path / "cache" / "engines").iterdir()
    from patchkit.base import store

    rows = json.loads(store.payload(entry))
    rows[0][1] = "../../outside"
    store.reseal(entry, json.dumps(rows).encode())
    assert engines._shipped()["sglang"].dist == "sglang"


def _sdist_bytes(top: str, files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def sdist_only_index(tmp_path, monkeypatch):
    """A file: index of flashinfer-python whose 0.3.1 is an sdist only (as PyPI has it), laid
    out as the repository; 0.3.2 an sdist laid out otherwise; 0.3.3 not there at all."""

    files = tmp_path / "files"
    files.mkdir()
    made = {
        "flashinfer_python-0.3.1.tar.gz": _sdist_bytes(
            "flashinfer_python-0.3.1",
            {
                "PKG-INFO": "Name: flashinfer-python\nVersion: 0.3.1\n",
                "setup.py": "",
                "flashinfer/__init__.py": "",
                "flashinfer/jit/comm.py": "def gen():\n    return [90, 100]\n",
                "include/flashinfer/comm.cuh": "// kernel\n",
                "csrc/k.cu": "// kernel\n",
            },
        ),
        "flashinfer_python-0.3.2.tar.gz": _sdist_bytes("flashinfer_python-0.3.2", {"src/other/x.py": ""}),
    }
    for name, data in made.items():
        (files / name).write_bytes(data)
    return _serve_index(tmp_path, monkeypatch, "flashinfer-python", [files / name for name in made])


def test_a_release_the_index_has_only_as_an_sdist_is_read_from_it(sdist_only_index):
    """FlashInfer 0.3.1 and 0.4.0 are on PyPI as sdists only: read from the sdist, laid out
    as the repository, not reported as no such release."""
    from patchkit.base.errors import FetchError
    from patchkit.upstream import fetch

    said: list[str] = []
    tree = fetch.release_tree("flashinfer", "0.3.1", say=said.append)
    assert (
        "flashinfer 0.3.1: the index has no wheel of it; reading its sdist (flashinfer/, include/, csrc/) ..." in said
    )
    target = open_target("flashinfer", tree)
    assert target.layout == "git"
    assert (tree / "flashinfer/jit/comm.py").read_text() == "def gen():\n    return [90, 100]\n"
    assert not (tree / "setup.py").exists()
    # an sdist laid out otherwise holds none of the engine's files: one clear error, no tree
    with pytest.raises(FetchError, match="holds none of flashinfer's files where its repository has them"):
        fetch.release_tree("flashinfer", "0.3.2")
    assert not (sdist_only_index / "cache" / "trees" / "flashinfer-0.3.2").exists()
    # neither a wheel nor an sdist: still no such release, naming the nearest ones
    with pytest.raises(FetchError, match="0.3.3: no such release"):
        fetch.release_tree("flashinfer", "0.3.3")


def test_an_installed_sdist_only_release_is_judged_against_its_sdist(sdist_only_index, tmp_path, run_cli):
    """status on an installed flashinfer 0.3.1 (built from its sdist): the pristine reference
    is the sdist, so an edit in site-packages reads as not the release's."""
    sp = tmp_path / "sp"
    (sp / "flashinfer" / "jit").mkdir(parents=True)
    (sp / "flashinfer" / "__init__.py").write_text('__version__ = "0.3.1"\n')
    (sp / "flashinfer" / "jit" / "comm.py").write_text("def gen():\n    return [90, 100]\n")
    (sp / "flashinfer_python-0.3.1.dist-info").mkdir()
    (sp / "flashinfer_python-0.3.1.dist-info" / "METADATA").write_text("Name: flashinfer-python\nVersion: 0.3.1\n")
    rec = tmp_path / "recipes"
    rec.mkdir()
    (rec / "widen.toml").write_text(
        'id = "widen"\nsummary = "add 120"\n[engines]\nflashinfer = ">=0.3.1"\n[[ops]]\nkind = "list-element"\n'
        'engine = "flashinfer"\nfile = "flashinfer/jit/comm.py"\nscope = "gen"\n[ops.locator]\n'
        'contains = ["90", "100"]\n[ops.params]\nelement = "120"\n'
    )
    code, out, err = run_cli("--recipes", str(rec), "status", "widen", "-t", f"flashinfer={sp}", "--json", cwd=tmp_path)
    assert code == 1, out + err
    assert "the index has no wheel of it; reading its sdist" in err
    assert json.loads(out)["recipes"][0]["state"] == "pending"
    # a hand edit of the goal: read against the sdist, which lacks it, it is someone else's
    comm = sp / "flashinfer" / "jit" / "comm.py"
    comm.write_text("def gen():\n    return [90, 100, 120]\n")
    code, out, err = run_cli("--recipes", str(rec), "status", "widen", "-t", f"flashinfer={sp}", "--json", cwd=tmp_path)
    (op,) = json.loads(out)["recipes"][0]["ops"]
    assert op["state"] == "someone-else" and op["evidence"]["pristine"] == "lacks it", op
    comm.write_text("def gen():\n    return [90, 100]\n")
    code, out, err = run_cli("--recipes", str(rec), "apply", "widen", "-t", f"flashinfer={sp}", cwd=tmp_path)
    assert code == 0, out + err
    assert (sp / "flashinfer" / "jit" / "comm.py").read_text() == "def gen():\n    return [90, 100, 120]\n"
    code, out, err = run_cli("--recipes", str(rec), "revert", "widen", "-t", f"flashinfer={sp}", cwd=tmp_path)
    assert code == 0 and (sp / "flashinfer" / "jit" / "comm.py").read_text() == "def gen():\n    return [90, 100]\n"
