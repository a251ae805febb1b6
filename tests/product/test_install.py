"""An installed patchkit works from any directory: `uv tool install` of the checkout into a
temporary tool directory, an empty HOME, and every command run from a directory outside
the checkout, with no upstream_pins.toml anywhere.  The tool's environment has no pip, so
the index is read by patchkit itself (patchkit/upstream/fetch.py).  Only PATCHKIT_CACHE points at
the shared wheel cache, so that releases are not downloaded again, and uv's own cache is
reused for patchkit's dependencies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from patchkit.upstream import fetch
from tests.conftest import ROOT, share_cache_key

pytestmark = [pytest.mark.real, pytest.mark.xdist_group("install")]

# What a user's shell may carry that reaching the index needs (certificates, proxies, index).
PASS = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    *fetch.INDEX_ENVS,
)


def uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    assert found, "uv is not installed: it is in the test extra (pip install -e '.[test]')"
    return found


def _copy_checkout(dest: Path) -> Path:
    """What the build reads (pyproject, README, the package, the recipes), so that the build
    writes nothing into the checkout."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "patchkit", dest / "patchkit", ignore=ignore)
    shutil.copytree(ROOT / "recipes", dest / "recipes", ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install")
    home = tmp / "home"
    home.mkdir()
    env = {k: os.environ[k] for k in PASS if os.environ.get(k)}
    if "SSL_CERT_FILE" not in env and os.path.isfile(os.environ.get("PIP_CERT", "")):
        env["SSL_CERT_FILE"] = os.environ["PIP_CERT"]  # uv reads SSL_CERT_FILE, not pip's setting
    env.update(
        {
            "PATH": "/usr/bin:/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "PATCHKIT_CACHE": str(fetch.cache_dir()),
        }
    )
    share_cache_key(home / ".config")
    uv_env = {
        **env,
        "UV_TOOL_DIR": str(tmp / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp / "bin"),
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "uv"),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }
    src = _copy_checkout(tmp / "src")
    python = os.path.realpath(sys.executable)
    proc = subprocess.run(
        [uv(), "tool", "install", "--python", python, str(src)], env=uv_env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exe = tmp / "bin" / "patchkit"
    assert exe.is_file()
    work = tmp / "work"  # outside the checkout, no project above it
    work.mkdir()

    def run(*args: str, timeout: float = 120):
        p = subprocess.run([str(exe), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    return {"run": run, "tmp": tmp, "work": work, "uv_env": uv_env, "python": python}


def test_the_tool_has_the_shipped_recipes_and_no_pip(installed):
    tools = installed["tmp"] / "tools" / "patchkit"
    site = next(tools.glob("lib/python*/site-packages"))
    assert sorted(p.name for p in (site / "patchkit" / "recipes").glob("*.toml")) == sorted(
        p.name for p in (ROOT / "recipes").glob("*.toml")
    )
    assert not (site / "pip").exists() and not (tools / "bin" / "pip").exists()
    code, out, err = installed["run"]("list", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert {r["source"] for r in doc["recipes"]} == {"shipped"}
    assert all(r["path"].startswith(str(site)) for r in doc["recipes"])
    shipped = {p.stem: p.read_text() for p in (ROOT / "recipes").glob("*.toml")}
    in_bundle = sorted(k for k, text in shipped.items() if "sm120" in tomllib.loads(text).get("bundles", []))
    assert doc["bundles"]["sm120"] == in_bundle
    assert set(shipped) == {r["id"] for r in doc["recipes"]}
    code, out, err = installed["run"]("show", "allreduce-fusion")
    assert code == 0 and "shipped" in out.splitlines()[0], err


def test_a_user_recipe_overrides_the_shipped_one(installed):
    user = installed["tmp"] / "home" / ".config" / "patchkit" / "recipes"
    user.mkdir(parents=True)
    text = (ROOT / "recipes" / "max-running-requests.toml").read_text()
    assert '\nsummary = "' in text
    (user / "max-running-requests.toml").write_text(text.replace('\nsummary = "', '\nsummary = "mine: ', 1))
    try:
        code, out, err = installed["run"]("list", "max-running-requests", "--recipes", str(installed["work"]))
        assert code == 0, err
        assert "[user, overrides shipped]" in out.splitlines()[0], out
        assert out.splitlines()[1].strip().startswith("mine: "), out
    finally:
        shutil.rmtree(user)


def test_drift_to_a_release_without_pins(installed):
    code, out, err = installed["run"]("drift", "--to", "sglang==0.5.13", "--json")
    assert code == 0, err
    doc = json.loads(out)
    states = {r["id"]: r["state"] for r in doc["recipes"]}
    assert states["autotune-cutlass"] == "upstream" and states["moe-backend-sm120"] == "upstream", states
    assert "allreduce-fusion" in states  # judged on the FlashInfer that SGLang 0.5.13 requires
    assert "flashinfer 0.6.12: the version this sglang release requires" in err


def test_drift_across_lists_the_releases_from_the_index_without_pip(installed):
    """The release list comes from the index every time: patchkit's own client, in an
    environment without pip."""
    code, out, err = installed["run"]("drift", "autotune-cutlass", "--across", "sglang==0.5.12..0.5.13", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["versions"] == ["0.5.12", "0.5.12.post1", "0.5.13"]
    assert [r["state"] for r in doc["matrix"]["0.5.13"]] == ["upstream"]


def test_wheel_from_explicit_releases(installed):
    out_dir = installed["work"] / "dist"
    code, out, err = installed["run"]("wheel", "autotune-cutlass", "--from", "sglang==0.5.9", "-o", str(out_dir))
    assert code == 0, err
    (whl,) = out_dir.glob("sglang-0.5.9+autotune.cutlass.*-py3-none-any.whl")
    with zipfile.ZipFile(whl) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/patchkit.json")]
        meta = json.loads(z.read(name))
    assert [r["id"] for r in meta["recipes"]] == ["autotune-cutlass"]


def test_apply_sm120_to_a_serving_venv(installed):
    """A venv with the released engines installed (no dependencies, from the cache), patched
    through --python from outside the checkout, then judged applied."""
    venv = installed["work"] / "venv"
    uv_env = installed["uv_env"]
    subprocess.run([uv(), "venv", "-q", "--python", installed["python"], str(venv)], env=uv_env, check=True, timeout=60)
    wheels = [str(fetch.fetch_wheel("sglang", "0.5.9")), str(fetch.fetch_wheel("flashinfer-python", "0.6.3"))]
    subprocess.run(
        [uv(), "pip", "install", "-q", "--offline", "--no-deps", "--python", str(venv / "bin" / "python"), *wheels],
        env=uv_env,
        check=True,
        timeout=120,
    )
    py = str(venv / "bin" / "python")
    code, out, err = installed["run"]("apply", "sm120", "--python", py, "--json")
    assert code == 0, out + err
    code, out, err = installed["run"]("status", "sm120", "--python", py, "--json")
    assert code == 0, out + err
    assert {r["state"] for r in json.loads(out)["recipes"]} == {"applied"}
