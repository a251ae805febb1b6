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
from tests.test_wheel import SGLANG_ONLY, make_venv

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
        f"patchkit: error: --repository-url http://{USER}:****@127.0.0.1:9/: carries a password, which would sit on "
        "a command line and in logs (hint: put them in TWINE_USERNAME and TWINE_PASSWORD, or in ~/.pypirc; hosts "
        "read ~/.netrc or keyring)"
    )


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
