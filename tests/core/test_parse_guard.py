"""What CPython's parser refuses never reaches libcst, whose native parser crashes the
interpreter (SIGSEGV, exit 139) on nesting CPython refuses with a message.  Target files
are covered row by row in tests/hostile_cases.toml; here, the other ways a file reaches
libcst: a pristine release (a cached wheel is input too) and `capture`."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from patchkit.authoring.capture import capture_python
from tests.conftest import MINIMAL_RECIPE, downloaded, mini_sglang

ROOT = Path(__file__).resolve().parents[2]
DEEP = 'def f():\n    return ["a"]\nx = ' + "(" * 3000 + "1" + ")" * 3000 + "\n"


def _run(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATCHKIT_CACHE": str(cache), "PATCHKIT_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _wheel_in_cache(cache: Path, files: dict[str, str]) -> None:
    d = cache / "wheels" / "sglang" / "0.5.9"
    d.mkdir(parents=True)
    with zipfile.ZipFile(d / "sglang-0.5.9-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    downloaded(d / "sglang-0.5.9-py3-none-any.whl", cache)


def test_a_pristine_file_too_deep_for_cpython_is_not_parsed(tmp_path):
    cache, root = tmp_path / "cache", tmp_path / "t"
    mini_sglang(root, {"sglang/srt/x.py": 'def f():\n    return ["a", "b"]\n'})
    _wheel_in_cache(cache, {"sglang/__init__.py": "", "sglang/srt/x.py": DEEP})
    code = (
        "from patchkit.upstream.pristine import Reference\n"
        "from patchkit.base.target import open_target\n"
        f"ref = Reference(open_target('sglang', {str(root)!r}))\n"
        "assert ref.available, ref.why_not\n"
        "assert ref.read('sglang/srt/x.py').startswith(b'def f')\n"
        "print(ref.module('sglang/srt/x.py'), ref.module('sglang/__init__.py') is not None)\n"
    )
    got = _run(["-c", code], tmp_path, cache)
    assert (got.returncode, got.stdout, got.stderr) == (0, "None True\n", "")


def test_status_judges_an_applied_edit_against_a_deep_pristine_file(tmp_path):
    # No journal: whether the edit is patchkit's is asked of the pristine release, whose
    # copy of the file CPython refuses.  It holds no site: the edit is patchkit's.
    cache, root = tmp_path / "cache", tmp_path / "t"
    mini_sglang(root, {"sglang/srt/x.py": 'def f():\n    return ["a", "b"]\n'})
    _wheel_in_cache(cache, {"sglang/__init__.py": "", "sglang/srt/x.py": DEEP})
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "r.toml").write_text(MINIMAL_RECIPE.format(id="r"))
    (tmp_path / "pins.toml").write_text('[sglang]\nversion = "0.5.9"\n')
    got = _run(
        ["-m", "patchkit", "--pins", "pins.toml", "--recipes", "recipes", "status", "r", "-t", f"sglang={root}"],
        tmp_path,
        cache,
    )
    assert got.returncode == 0, (got.returncode, got.stdout, got.stderr)
    assert "applied" in got.stdout and "upstream" not in got.stdout


def test_capture_says_a_file_python_refuses_does_not_parse():
    deep_unary = 'def f():\n    return ["a"]\nx = ' + "-" * 20000 + "1\n"  # MemoryError, not SyntaxError
    for old in (DEEP, deep_unary):
        ops, failed = capture_python("sglang", "sglang/srt/x.py", old, old.replace('["a"]', '["a", "b"]'))
        assert ops == [] and len(failed) == 1
        assert failed[0].why.startswith("does not parse as Python ("), failed[0]
