"""`pip install -U sglang` over a patched venv, then `patchkit apply --python PY` to patch again
(the venv's profile, `apply ... --save` wrote, names the recipes).

Two real releases (sglang 0.5.9, then 0.5.10.post1) installed one after the other with real
pip into a real venv.  The files pip replaced are not the user's edits: their bytes are what
the new release's RECORD lists (and the new pristine release's), so patchkit's record of
them is stale, status reads `pending`, and apply works without --force, naming the upgrade.
A hand edit still reads `modified`, and apply still refuses it.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from patchkit.core import record
from patchkit.upstream import fetch
from tests.fleet.test_wheel import make_venv, pip

pytestmark = pytest.mark.real

RECIPES = ("allreduce-fusion", "moe-backend-sm120")
MOE = ("moe-backend-sm120",)  # SGLang only: a venv without FlashInfer serves it
SERVER_ARGS = "sglang/srt/server_args.py"
COMMUNICATOR = "sglang/srt/layers/communicator.py"
UPGRADED = "sglang was upgraded from 0.5.9 to 0.5.10.post1 since patchkit last wrote it"


def install(py: Path, *wheels: tuple[str, str]) -> None:
    """pip install --no-deps of cached release wheels, offline."""
    paths = [str(fetch.fetch_wheel(dist, version)) for dist, version in wheels]
    pip(py, "install", "--no-deps", "--no-index", "--no-compile", *paths)


def patched_venv(tmp_path: Path, run_cli, recipes=RECIPES) -> tuple[Path, Path]:
    """A venv with sglang 0.5.9 (and flashinfer 0.6.3 where a recipe edits it), patched in place
    through --python."""
    py, site = make_venv(tmp_path / "venv")
    wheels = [("sglang", "0.5.9")] + ([("flashinfer-python", "0.6.3")] if "allreduce-fusion" in recipes else [])
    install(py, *wheels)
    code, out, err = run_cli("apply", *recipes, "--python", str(py))
    assert code == 0, out + err
    journal = json.loads((site / ".patchkit" / "journal.json").read_text())
    assert journal["engines"]["sglang"]["version"] == "0.5.9"
    return py, site


def states(out: str) -> dict[str, dict[int, tuple[str, str]]]:
    return {r["id"]: {o["index"]: (o["state"], o["message"]) for o in r["ops"]} for r in json.loads(out)["recipes"]}


def test_pip_upgrade_over_a_patched_venv_reads_pending_and_apply_patches_again(run_cli, tmp_path, monkeypatch):
    py, site = patched_venv(tmp_path, run_cli)
    # The venv's own profile records what it should carry (--save: nothing to apply, only recorded).
    code, out, err = run_cli("apply", *RECIPES, "--save", "--python", str(py))
    profile = site.resolve() / ".patchkit" / "profile.toml"
    assert code == 0 and f"profile {profile}: recipes += allreduce-fusion; recipes += moe-backend-sm120" in out, out
    install(py, ("sglang", "0.5.10.post1"))

    # Only the RECORD pip wrote to tell by: no pristine release to be had (an empty cache, offline).
    with monkeypatch.context() as m:
        m.setenv("PATCHKIT_CACHE", str(tmp_path / "empty-cache"))
        m.setenv("PATCHKIT_OFFLINE", "1")
        code, out, err = run_cli("status", *RECIPES, "--python", str(py), "--json")
        assert code == 1, out + err
        ops = states(out)
        for rid, i in (("allreduce-fusion", 1), ("allreduce-fusion", 6), ("moe-backend-sm120", 1)):
            state, msg = ops[rid][i]
            assert state == "pending", (rid, i, state, msg)
            assert UPGRADED in msg and "sglang-0.5.10.post1.dist-info/RECORD lists its bytes" in msg, msg
        assert ops["allreduce-fusion"][4][0] == "applied"  # flashinfer was not upgraded: still patched
        assert json.loads(out)["upgraded"] == [{"engine": "sglang", "from": "0.5.9", "to": "0.5.10.post1"}]
        # doctor says so too, and how to patch again.
        m.setenv("FLASHINFER_WORKSPACE_BASE", str(tmp_path / "fiws"))
        code, out, err = run_cli("doctor", "--python", str(py), "--workspace", str(tmp_path / "nows"), "--json")
        said = [f["message"] for f in json.loads(out)["findings"] if f["level"] == "warn"]
        assert (
            f"{UPGRADED}: sglang/srt/layers/communicator.py, sglang/srt/server_args.py are the new release's, so "
            f"allreduce-fusion, moe-backend-sm120 are no longer applied; `patchkit apply --python {py}` patches it "
            "again to the profile" in said
        ), said

        # `patchkit apply --python PY`, the venv's profile naming the recipes, works without
        # --force, and says why the records were stale.
        code, out, err = run_cli("apply", "--python", str(py))
        assert code == 0, out + err
        assert UPGRADED in out
        assert "wrote 2 file(s)" in out

    code, out, err = run_cli("status", *RECIPES, "--python", str(py), "--json")
    assert code == 0, out + err
    assert "upgraded" not in json.loads(out)
    assert {s for ops in states(out).values() for s, _ in ops.values()} == {"applied"}
    journal = json.loads((site / ".patchkit" / "journal.json").read_text())
    assert journal["engines"]["sglang"]["version"] == "0.5.10.post1"
    assert [p for p in record.verify(site / "sglang-0.5.10.post1.dist-info") if ".pyc" not in p] == []

    # Reverted, the files are 0.5.10.post1's as released, byte for byte.
    assert run_cli("revert", *RECIPES, "--python", str(py))[0] == 0
    with zipfile.ZipFile(fetch.fetch_wheel("sglang", "0.5.10.post1")) as z:
        for rel in (SERVER_ARGS, COMMUNICATOR):
            assert (site / rel).read_bytes() == z.read(rel), rel


def test_a_hand_edit_reads_modified_and_apply_refuses_it_before_and_after_an_upgrade(run_cli, tmp_path):
    py, site = patched_venv(tmp_path, run_cli, MOE)
    sa = site / SERVER_ARGS
    # Without an upgrade: the user takes the edit out by hand and changes a line of their own.
    # RECORD still lists patchkit's bytes, so it is no installer's doing.
    patched = sa.read_bytes()
    text = patched.decode()
    start = text.rindex("        if (\n", 0, text.index("patchkit: using flashinfer_cutlass"))
    mine = text[:start] + "        # my own line\n" + text[text.index("\n\n", start) + 2 :]
    sa.write_text(mine)
    assert sa.read_bytes() != patched
    code, out, err = run_cli("status", *MOE, "--python", str(py), "--json")
    assert (code, states(out)["moe-backend-sm120"][1][0]) == (1, "modified"), out
    code, out, err = run_cli("apply", *MOE, "--python", str(py))
    assert code == 1 and "modified: patchkit applied this op, but the code no longer shows it" in err, out + err
    assert sa.read_text() == mine

    # pip upgrades over the hand-edited file.  With RECORD's row for it gone, the new
    # release's own wheel (the pristine release) still recognises pip's bytes.
    install(py, ("sglang", "0.5.10.post1"))
    rec = site / "sglang-0.5.10.post1.dist-info" / "RECORD"
    rec.write_text("".join(ln for ln in rec.read_text().splitlines(True) if not ln.startswith(SERVER_ARGS + ",")))
    code, out, err = run_cli("status", *MOE, "--python", str(py), "--json")
    state, msg = states(out)["moe-backend-sm120"][1]
    assert (code, state) == (1, "pending"), msg
    assert f"{UPGRADED}: the file is sglang 0.5.10.post1's wheel's, byte for byte" in msg

    # A file pip replaced and the user then edited is the user's edit again.
    edited = sa.read_text() + "# my own line\n"
    sa.write_text(edited)
    code, out, err = run_cli("status", *MOE, "--python", str(py), "--json")
    assert (code, states(out)["moe-backend-sm120"][1][0]) == (1, "modified"), out
    code, out, err = run_cli("apply", *MOE, "--python", str(py))
    assert code == 1 and "nothing was written" in err, out + err
    assert sa.read_text() == edited
