"""The offline tier's network guard (tests/conftest.py) fires, and names the test.

A small test module runs in its own pytest process with ``PATCHKIT_OFFLINE_TESTS=1`` and a
copy of our conftest; each of its tests reaches for the network in a different way.  Without
the guard they would pass (or fail some other way), and this test would fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

from tests.conftest import OFFLINE_ENV, ROOT

INNER = """
import os
import socket
import subprocess
import sys

import pytest

from patchkit.upstream import fetch


def test_connect_by_name():
    socket.create_connection(("pypi.org", 443), timeout=3)


def test_connect_by_address():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect(("127.0.0.1", 9))


def test_connect_ex_whose_error_is_swallowed():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect_ex(("::1", 9))
    except Exception:
        pass


def test_pip_download(tmp_path):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0", "--timeout", "3"]
    subprocess.run([*cmd, "patchkit-no-such-dist==0", "-d", str(tmp_path)], capture_output=True)


def test_fetch_wheel_with_an_empty_cache(monkeypatch):
    assert not any(fetch.cache_dir().iterdir())  # not ~/.cache/patchkit, where releases may lie
    monkeypatch.delenv("PATCHKIT_OFFLINE")  # which would refuse before any network: the guard's turn
    fetch.fetch_wheel("sglang", "0.5.9")


def test_local_sockets_and_subprocesses_are_fine():
    a, b = socket.socketpair()
    a.sendall(b"x")
    assert b.recv(1) == b"x"
    a.close(), b.close()
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\\n"
    assert os.environ["PIP_NO_INDEX"] == "1"


@pytest.mark.real
def test_real_is_left_out(release_dir):
    raise AssertionError("a real test ran in the offline tier")
"""

REFUSED = {
    "test_connect_by_name": "look up 'pypi.org'",
    "test_connect_by_address": "connect to ('127.0.0.1', 9)",
    "test_connect_ex_whose_error_is_swallowed": "connect to ('::1', 9)",
    "test_pip_download": "run `pip download`",
    "test_fetch_wheel_with_an_empty_cache": "look up 'offline.invalid'",  # the tier's PIP_INDEX_URL
}


def test_offline_tier_refuses_the_network_and_names_the_test(tmp_path):
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    report = tmp_path / "report.xml"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env[OFFLINE_ENV] = "1"
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    proc = subprocess.run(
        [*cmd, "-m", "not real", f"--junitxml={report}", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    outcomes: dict[str, list[str]] = {}
    for case in ET.parse(report).iter("testcase"):
        problems = [f"{c.get('message', '')}\n{c.text or ''}" for c in case if c.tag in ("failure", "error")]
        outcomes.setdefault(case.get("name"), []).extend(problems)
    assert set(outcomes) == {*REFUSED, "test_local_sockets_and_subprocesses_are_fine"}, proc.stdout
    assert outcomes["test_local_sockets_and_subprocesses_are_fine"] == [], proc.stdout
    for name, what in REFUSED.items():
        expected = f"test_inner.py::{name}: tried to {what} in the offline tier ({OFFLINE_ENV}=1)"
        assert any(expected in p for p in outcomes[name]), (name, outcomes[name])


GROUPED = """
import os

import pytest

pytestmark = pytest.mark.xdist_group("one")


@pytest.mark.parametrize("i", range(6))
def test_where(i):
    with open(os.path.join(os.environ["GROUP_OUT"], f"ran-{i}"), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path):
    """`make test` relies on it (tests sharing a module fixture or patchkit's drift cache carry
    one xdist_group): under pytest 9 with pytest-xdist 3.8 a group was silently split."""
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["GROUP_OUT"] = str(tmp_path / "out")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-q"]
    proc = subprocess.run(
        [*cmd, "-n", "2", "--dist", "loadgroup", str(tmp_path / "test_grouped.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    workers = {(tmp_path / "out" / f"ran-{i}").read_text() for i in range(6)}
    assert len(workers) == 1, workers
