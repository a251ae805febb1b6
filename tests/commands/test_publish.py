"""`patchkit publish`: a fleet through a real package index.

The real test starts pypiserver (from the `test` extra) on 127.0.0.1 with an htpasswd file,
publishes the SGLang recipes' wheel with twine (credentials in TWINE_USERNAME/TWINE_PASSWORD
only), and installs it into two fresh host venvs, one with pip and one with uv, by exact
version from the index's simple API.  `status --python` reads every recipe applied on both.
A third host installs the plain upstream release from the same index: it reads `pending`, and
`patchkit run` refuses to start its server.  The password never appears in any output.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from patchkit.upstream import fetch
from tests.conftest import ROOT
from tests.fleet.test_wheel import SGLANG_ONLY, make_venv

USER = "fleet"


def _pk(*args: str, env: dict, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, **env}
    )


def test_a_password_in_the_url_is_refused_without_being_shown(tmp_path):
    secret = "pw-" + secrets.token_hex(8)
    url = f"http://{USER}:{secret}@127.0.0.1:9/"
    p = _pk("publish", "x", "--from", "sglang==0.5.9", "--repository-url", url, env={}, cwd=tmp_path)
    assert p.returncode == 2 and secret not in p.stdout + p.stderr, p.stdout + p.stderr
    assert p.stderr.strip() == (
        "patchkit: error: --repository-url http://***@127.0.0.1:9/: carries a password, which would sit on "
        "a command line and in logs (hint: put them in TWINE_USERNAME and TWINE_PASSWORD, or in ~/.pypirc; hosts "
        "read ~/.netrc or keyring)"
    )


def _offline_world(tmp_path: Path) -> tuple[dict, list[str]]:
    """A recipe and a hand-made sglang 0.5.9 release wheel in a private cache: the env and
    the leading arguments of a `publish` that builds offline."""
    import zipfile

    from tests.conftest import MINIMAL_RECIPE, release_in_cache

    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "r.toml").write_text(MINIMAL_RECIPE.format(id="r"))
    meta = "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n"
    wheel = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    whl = release_in_cache(tmp_path / "cache", "sglang", "0.5.9", {
        "sglang/__init__.py": "", "sglang/version.py": '__version__ = "0.5.9"\n',
        "sglang/srt/x.py": 'def f():\n    return ["a"]\n', "sglang-0.5.9.dist-info/METADATA": meta,
        "sglang-0.5.9.dist-info/WHEEL": wheel, "sglang-0.5.9.dist-info/RECORD": "",
    })  # fmt: skip
    assert zipfile.is_zipfile(whl)
    env = {"PATCHKIT_CACHE": str(tmp_path / "cache"), "PATCHKIT_OFFLINE": "1", "HOME": str(tmp_path)}
    return env, ["--recipes", str(tmp_path / "recipes"), "publish", "r", "--from", "sglang==0.5.9"]


@pytest.mark.parametrize("userinfo", ["__token__:", ""])
def test_a_token_as_the_urls_user_name_is_neither_printed_nor_on_twines_command_line(tmp_path, userinfo, monkeypatch):
    """``https://TOKEN@host/`` (a token as the user name): publish --dry-run prints the URL
    as ``***@host`` and twine's command line without it; the upload passes the user name in
    twine's environment (TWINE_USERNAME), never in its argv.  With a password too it is
    refused, and the line shows neither."""
    secret = "pypi-" + secrets.token_hex(8)
    url = f"https://{userinfo}{secret}@127.0.0.1:9/simple/"
    env, args = _offline_world(tmp_path)
    p = _pk(*args, "--repository-url", url, "--dry-run", "-o", str(tmp_path / "dist"), env=env, cwd=tmp_path)
    both = p.stdout + p.stderr
    assert secret not in both, both
    if userinfo:  # a password: refused, before anything is built
        assert p.returncode == 2 and "https://***@127.0.0.1:9/simple/: carries a password" in p.stderr, both
        return
    assert p.returncode == 0, both
    assert "TWINE_USERNAME=*** " in p.stdout and "--repository-url https://127.0.0.1:9/simple/ " in p.stdout, both

    # The upload itself: what twine is given (subprocess.run stands in for it).
    from patchkit.commands import publish

    seen, run = {}, subprocess.run

    def twine(cmd, **kw):
        if cmd[0] != "twine":
            return run(cmd, **kw)
        seen.update(cmd=cmd, env=kw.get("env"))
        return subprocess.CompletedProcess(cmd, 0, f"Uploading to https://{secret}@127.0.0.1:9/simple/\n", "")

    monkeypatch.setattr(publish, "twine_command", lambda: ["twine"])
    monkeypatch.setattr(publish.subprocess, "run", twine)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)  # no upstream_pins.toml above (the checkout's pins a real wheel's sha256)
    from patchkit.cli import main

    with pytest.raises(SystemExit) as e:
        main([*args, "--repository-url", url, "-o", str(tmp_path / "dist")])
    assert e.value.code == 0
    assert not any(secret in a for a in seen["cmd"]) and "https://127.0.0.1:9/simple/" in seen["cmd"], seen["cmd"]
    assert seen["env"]["TWINE_USERNAME"] == secret


def test_shown_masks_user_information_even_in_a_url_that_does_not_parse():
    assert fetch.shown("https://tok@h:1/p?q#f", "***@") == "https://***@h:1/p?q#f"
    assert fetch.shown("https://u:pw@h/", "***@") == "https://***@h/"
    assert fetch.shown("http://tok@[::1/") == "http://[::1/"
    assert fetch.shown("http://tok@[::1]:8/s/") == "http://[::1]:8/s/"  # brackets kept (hostname drops them)
    assert fetch.shown("https://h/p@x") == "https://h/p@x"  # an @ in the path is no credential
    assert fetch.shown("https://h/") == "https://h/"


@pytest.fixture
def index(tmp_path):
    """(upload URL, simple URL, password): pypiserver on a free port of 127.0.0.1, uploads,
    listings and downloads behind an htpasswd file (no fallback to another index), the plain
    sglang 0.5.9 wheel already on it."""
    from passlib.apache import HtpasswdFile

    secret = "pw-" + secrets.token_hex(12)
    htpasswd = HtpasswdFile(str(tmp_path / "htpasswd"), new=True)
    htpasswd.set_password(USER, secret)
    htpasswd.save()
    packages = tmp_path / "packages"
    packages.mkdir()
    shutil.copy(fetch.fetch_wheel("sglang", "0.5.9"), packages)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port)]
    cmd += ["-P", str(tmp_path / "htpasswd"), "-a", "update,download,list", "--disable-fallback"]
    cmd += ["--hash-algo", "sha256", str(packages)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(200):
            try:
                _get(base + "simple/", secret)
                break
            except OSError:
                assert server.poll() is None, "pypiserver exited"
                time.sleep(0.1)
        else:
            pytest.fail("pypiserver did not answer in 20 s")
        yield base, base + "simple/", secret
    finally:
        server.terminate()
        server.wait(timeout=10)


def _get(url: str, secret: str) -> str:
    auth = base64.b64encode(f"{USER}:{secret}".encode()).decode()
    req = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
    return urllib.request.urlopen(req, timeout=5).read().decode()


def _host_install(tool: str, py: Path, simple: str, home: Path, requirement: str, secret: str) -> None:
    """pip or uv installs into the venv of ``py`` from the index, its credentials in
    ~/.netrc (their own setting), never on the command line; the password stays out of
    their output."""
    env = {**os.environ, "HOME": str(home), "UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(home / "uv-cache")}
    if tool == "pip":
        cmd = [sys.executable, "-m", "pip", "--isolated", "--python", str(py), "--disable-pip-version-check"]
        cmd += ["install", "--no-input", "--no-compile"]
    else:
        cmd = [str(Path(sys.executable).parent / "uv"), "pip", "install", "--python", str(py)]
    proc = subprocess.run([*cmd, "--no-deps", "--index-url", simple, requirement], capture_output=True, text=True,
                          env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert secret not in proc.stdout + proc.stderr


def _profile(py: Path, recipes) -> None:
    """What config management drops on a host: the venv's own profile (as `apply --save` writes it)."""
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    (site / ".patchkit").mkdir(exist_ok=True)
    (site / ".patchkit" / "profile.toml").write_text(f"recipes = {json.dumps(list(recipes))}\n")


def _states(out: str) -> dict[str, str]:
    return {r["id"]: r["state"] for r in json.loads(out)["recipes"]}


@pytest.mark.real
def test_publish_to_a_real_index_and_install_on_two_hosts_with_pip_and_uv(index, tmp_path, run_cli):
    upload, simple, secret = index
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine 127.0.0.1 login {USER} password {secret}\n")
    (home / ".netrc").chmod(0o600)
    env = {"TWINE_USERNAME": USER, "TWINE_PASSWORD": secret, "HOME": str(home)}
    args = ("publish", *SGLANG_ONLY, "--from", "sglang==0.5.9", "--repository-url", upload)

    # --dry-run: the wheel is built, the twine command printed, nothing uploaded.
    p = _pk(*args, "--dry-run", "-o", str(tmp_path / "dist"), env=env)
    assert p.returncode == 0, p.stderr
    assert f"upload --repository-url {upload} --non-interactive" in p.stdout and secret not in p.stdout + p.stderr
    whl = next((tmp_path / "dist").glob("sglang-*.whl"))
    version = whl.name.split("-")[1]
    assert re.fullmatch(
        r"0\.5\.9\+autotune\.cutlass\.max\.running\.requests\.moe\.backend\.sm120\.[0-9a-f]{8}", version
    )
    assert "+" not in _get(simple + "sglang/", secret)  # not uploaded

    # Wrong credentials: twine's refusal, exit 1, and still no password shown.
    p = _pk(*args, "-o", str(tmp_path / "dist"), env={**env, "TWINE_PASSWORD": secret + "-wrong"})
    assert p.returncode == 1 and "twine upload failed" in p.stderr, p.stdout + p.stderr
    assert secret not in p.stdout + p.stderr

    p = _pk(*args, "-o", str(tmp_path / "dist"), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert secret not in p.stdout + p.stderr
    assert f"sglang=={version}" in p.stdout
    assert whl.name in _get(simple + "sglang/", secret)

    # Two hosts, pip and uv, from the index by exact version.
    # Without the credentials in ~/.netrc the index refuses the host (the auth is real).
    nobody = tmp_path / "nobody"
    nobody.mkdir()
    with pytest.raises(AssertionError, match="401|[Uu]nauthorized|No matching distribution"):
        _host_install("pip", make_venv(tmp_path / "host-nobody")[0], simple, nobody, f"sglang=={version}", secret)
    hosts = {}
    for tool in ("pip", "uv"):
        hosts[tool], _ = make_venv(tmp_path / f"host-{tool}")
        _host_install(tool, hosts[tool], simple, home, f"sglang=={version}", secret)
    for how, py in hosts.items():
        code, out, err = run_cli("status", *SGLANG_ONLY, "--python", str(py), "--json")
        assert code == 0 and set(_states(out).values()) == {"applied"}, (how, out, err)
    # A fleet host serving the patched code under the guard: its profile, then `patchkit run`.
    py = hosts["pip"]
    _profile(py, SGLANG_ONLY)
    p = _pk("run", "--", str(py), "-c", "print('served')", env={})
    assert p.returncode == 0 and p.stdout == "served\n", p.stdout + p.stderr

    # PEP 440: `==0.5.9` matches the local version 0.5.9+LABEL, and pip takes it over the plain one.
    py, site = make_venv(tmp_path / "host-pinned")
    _host_install("pip", py, simple, home, "sglang==0.5.9", secret)
    assert (site / f"sglang-{version}.dist-info").is_dir()

    # A host that installs the plain release from the same index (`===`, the exact string):
    # pending, and the guard refuses to start its server.
    py, site = make_venv(tmp_path / "host-plain")
    _host_install("pip", py, simple, home, "sglang===0.5.9", secret)
    code, out, err = run_cli("status", *SGLANG_ONLY, "--python", str(py), "--json")
    assert code == 1 and set(_states(out).values()) == {"pending"}, out + err
    _profile(py, SGLANG_ONLY)
    p = _pk("run", "--", str(py), "-c", "print('served')", env={})
    assert p.returncode == 1 and "served" not in p.stdout, p.stdout + p.stderr
    assert f"patchkit run: refusing to start {py}" in p.stderr
