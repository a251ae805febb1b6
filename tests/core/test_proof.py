"""Provenance by proof (patchkit/core/proof.py): an edit is patchkit's only where patchkit's
own record proves it wrote it, never by elimination ("the release lacks it, so it is ours").

Offline, on a miniature tree: the site's recorded bytes prove an edit in a file changed
elsewhere; a site changed since reads ``modified`` and is never reverted; with the journal
and its mirror lost the edit is someone else's until ``adopt``.  On real releases (marked
``real``): a user's own hand edit of a recipe's goal, on a tree patchkit never touched,
reads ``someone-else``; revert (with or without --force) leaves it, apply writes nothing
twice, and adopt makes it patchkit's.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from patchkit.base import journal
from tests.conftest import downloaded, mini_sglang

GATE = """\
_is_sm90_supported = True
_is_sm100_supported = False
_is_sm120_supported = True


def apply_fusion(batch_size):
    return (_is_sm90_supported or _is_sm100_supported) and batch_size < 128


def other():
    return 1
"""

WIDEN = """
id = "widen"
summary = "admit SM120 in the fusion gate"
[engines]
sglang = ">=0.5.9"
[[ops]]
kind = "or-operand"
engine = "sglang"
file = "sglang/srt/gate.py"
scope = "apply_fusion"
[ops.locator]
operands = ["_is_sm90_supported", "_is_sm100_supported"]
[ops.params]
operand = "_is_sm120_supported"
"""


def _wheel(cache: Path, gate_py: str) -> None:
    """The pristine release sglang 0.5.9, as a wheel in patchkit's cache, holding ``gate_py``."""
    wheels = cache / "wheels" / "sglang" / "0.5.9"
    wheels.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels / "sglang-0.5.9-py3-none-any.whl", "w") as z:
        z.writestr("sglang/__init__.py", "")
        z.writestr("sglang/version.py", '__version__ = "0.5.9"\n')
        z.writestr("sglang/srt/gate.py", gate_py)
    downloaded(wheels / "sglang-0.5.9-py3-none-any.whl", cache)


@pytest.fixture
def mini(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("PATCHKIT_CACHE", str(tmp_path / "cache"))
    root = mini_sglang(tmp_path / "t", {"sglang/srt/gate.py": GATE})
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "widen.toml").write_text(WIDEN)

    def cli(*args):
        return run_cli("--recipes", str(recipes), *args, "-t", f"sglang={root}")

    def op(*args):
        code, out, err = cli("status", "widen", "--json", *args)
        return code, json.loads(out)["recipes"][0]["ops"][0]

    return root, root / "sglang/srt/gate.py", cli, op


def test_the_journal_records_the_digest_of_the_bytes_at_the_site(mini):
    root, gate, cli, _ = mini
    assert cli("apply", "widen")[0] == 0
    doc = json.loads((root / ".patchkit/journal.json").read_text())
    site = doc["engines"]["sglang"]["applied"]["widen"]["sites"]["1"]
    assert site["file"] == "sglang/srt/gate.py" and re.fullmatch(r"[0-9a-f]{64}", site["digest"])
    mirror = json.loads(journal.mirror_path(root).read_text())
    assert mirror["root"] == str(root) and mirror["engines"] == doc["engines"]


def test_an_edit_elsewhere_in_the_file_leaves_the_proof_standing(mini):
    """The file is no longer byte for byte what patchkit wrote; the site's own bytes are."""
    root, gate, cli, op = mini
    assert cli("apply", "widen")[0] == 0
    gate.write_text(gate.read_text().replace("return 1", "return 2  # mine"))
    code, o = op()
    assert (code, o["state"]) == (0, "applied"), o
    assert "patchkit's journal records these very bytes at the site" in o["message"], o
    code, out, err = cli("revert", "widen", "--force")  # the file changed: --force; the user's line stays
    assert code == 0, (out, err)
    assert gate.read_text() == GATE.replace("return 1", "return 2  # mine")


def test_a_site_changed_since_reads_modified_and_is_never_reverted(mini):
    """The user rewrote patchkit's edit in their own words (the goal still holds): the bytes
    at the site are not patchkit's any more, so revert will not take them back; --force
    only forgets patchkit's record, writing no byte of the file."""
    root, gate, cli, op = mini
    _wheel(root.parent / "cache", GATE)  # the release: it does not have the edit
    assert cli("apply", "widen")[0] == 0
    mine = gate.read_text().replace(
        "(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)",
        "(_is_sm90_supported or _is_sm100_supported\n            or _is_sm120_supported)",
    )
    assert mine != gate.read_text()
    gate.write_text(mine)
    code, o = op()
    assert o["state"] == "modified" and "not what patchkit wrote" in o["message"], o
    assert cli("revert", "widen")[0] == 1 and gate.read_text() == mine
    code, out, err = cli("revert", "widen", "--force")
    assert code == 0 and gate.read_text() == mine, (out, err)
    assert op()[1]["state"] == "someone-else"  # forgotten: nothing proves it patchkit's now


def test_with_the_journal_and_its_mirror_lost_the_edit_is_someone_elses_until_adopted(mini):
    root, gate, cli, op = mini
    assert cli("apply", "widen")[0] == 0
    applied = gate.read_text()
    shutil.rmtree(root / ".patchkit")
    assert op()[1]["state"] == "applied"  # the mirror proves it
    journal.mirror_path(root).unlink()
    code, o = op()
    # No pristine release offline: upstream or someone else cannot be told apart.
    assert o["state"] == "applied?", o
    for force in ([], ["--force"]):
        code, out, err = cli("revert", "widen", *force)
        assert code == 1 and gate.read_text() == applied, (out, err)


def test_with_every_record_lost_and_the_release_at_hand_the_edit_is_someone_elses(mini):
    """Never `upstream` (the release lacks it), never `applied` by elimination; revert
    refuses (exit 1, nothing written) with or without --force, until it is adopted."""
    root, gate, cli, op = mini
    _wheel(root.parent / "cache", GATE)
    assert cli("apply", "widen")[0] == 0
    applied = gate.read_text()
    shutil.rmtree(root / ".patchkit")
    journal.mirror_path(root).unlink()
    code, o = op()
    assert (code, o["state"]) == (0, "someone-else"), o
    for force in ([], ["--force"]):
        code, out, err = cli("revert", "widen", *force)
        assert code == 1 and "someone else made this edit" in err and gate.read_text() == applied, (out, err)
    code, out, err = cli("apply", "widen")
    assert code == 0 and gate.read_text() == applied and "nothing to apply" in out, (out, err)
    code, out, err = cli("adopt", "widen", "--dry-run")
    assert code == 0 and "would be adopted" in out and not (root / ".patchkit/journal.json").exists(), out
    assert cli("adopt", "widen")[0] == 0
    assert op()[1]["state"] == "applied"
    assert cli("revert", "widen")[0] == 0 and gate.read_text() == GATE


def test_a_planted_record_whose_digest_is_not_the_sites_proves_nothing(mini):
    root, gate, cli, op = mini
    _wheel(root.parent / "cache", GATE)
    assert cli("apply", "widen")[0] == 0
    gate.write_text(gate.read_text() + "# mine\n")  # the file is not as patchkit wrote it
    doc = json.loads((root / ".patchkit/journal.json").read_text())
    doc["engines"]["sglang"]["applied"]["widen"]["sites"]["1"]["digest"] = "0" * 64
    (root / ".patchkit/journal.json").write_text(json.dumps(doc))
    journal.mirror_path(root).unlink()
    code, o = op()
    assert o["state"] == "modified", o


def test_a_mirror_naming_another_root_is_not_read(mini, tmp_path):
    root, gate, cli, op = mini
    assert cli("apply", "widen")[0] == 0
    path = journal.mirror_path(root)
    doc = json.loads(path.read_text())
    doc["root"] = str(tmp_path / "elsewhere")
    path.write_text(json.dumps(doc))
    (root / ".patchkit/journal.json").unlink()
    assert op()[1]["state"] == "applied?"
    assert journal.mirror_engines(root, path.read_bytes()) == {}
    doc["root"] = str(root)
    assert journal.mirror_engines(root, json.dumps(doc).encode()) == doc["engines"]


def test_adopt_refuses_nothing_and_changes_nothing_without_someone_elses_edit(mini):
    root, gate, cli, op = mini
    code, out, err = cli("adopt", "widen")
    assert code == 0 and "nothing to adopt" in out and gate.read_text() == GATE, (out, err)
    assert not (root / ".patchkit").exists()


# -- real releases -----------------------------------------------------------------------------


def _hand_edit(path: Path, field: str, value: str) -> str:
    """Set ``field``'s default to ``value`` as a user would, in an editor: the first
    ``= None`` that ends the field's statement (``field: T = None``, or an annotation that
    spans lines, ``field: A[...,\n] = None``)."""
    text = path.read_text()
    m = re.search(rf"^(\s+{field}:.*?)= None$", text, re.M | re.S)
    assert m and m.group(1).count("\n") < 6, f"{field} not found in {path}"
    edited = text[: m.start()] + f"{m.group(1)}= {value}" + text[m.end() :]
    _write(path, edited)
    return edited


def _write(path: Path, text: str) -> None:
    """As an editor saves: a new file at the name (the tree's files are hard links to the
    shared release, which must not change)."""
    path.unlink()
    path.write_text(text)


@pytest.mark.real
@pytest.mark.parametrize(
    "version, rel",
    [("0.5.23", "sglang/srt/arg_groups/fields/schedule.py"), ("0.5.9", "sglang/srt/server_args.py")],
)
def test_a_users_hand_edit_of_the_goal_is_never_patchkits(tree, run_cli, recipes_dir, version, rel):
    """The issue's case: max_running_requests set to 1024 by hand, patchkit never run on
    the tree.  It read `applied` ("patchkit's edit: the wheel does not have it") and revert
    set the user's value back to None."""
    root = tree("sglang", version, links=True)
    path = root / rel
    mine = _hand_edit(path, "max_running_requests", "1024")
    t = ["--recipes", str(recipes_dir)]
    tg = ["-t", f"sglang={root}"]
    code, out, err = run_cli(*t, "status", "max-running-requests", *tg, "--json")
    r = json.loads(out)["recipes"][0]
    assert code == 0 and r["state"] == "someone-else", (out, err)
    assert "patchkit did not write it" in r["ops"][0]["message"], r
    for force in ([], ["--force"]):
        code, out, err = run_cli(*t, "revert", "max-running-requests", *tg, *force)
        assert code == 1 and "someone else made this edit" in err, (out, err)
        assert path.read_text() == mine
    code, out, err = run_cli(*t, "apply", "max-running-requests", *tg)
    assert code == 0 and path.read_text() == mine, (out, err)
    assert not (root / ".patchkit/journal.json").exists()  # nothing was written, journal neither
    code, out, err = run_cli(*t, "adopt", "max-running-requests", *tg)
    assert code == 0, (out, err)
    code, out, err = run_cli(*t, "status", "max-running-requests", *tg, "--json")
    assert json.loads(out)["recipes"][0]["state"] == "applied", out
    code, out, err = run_cli(*t, "revert", "max-running-requests", *tg)
    assert code == 0, (out, err)
    assert "= None" in path.read_text() and "max_running_requests" in path.read_text()
    code, out, err = run_cli(*t, "status", "max-running-requests", *tg, "--json")
    assert json.loads(out)["recipes"][0]["state"] == "pending", out


@pytest.mark.real
def test_a_gate_widened_by_hand_in_the_users_own_formatting(tree, run_cli, recipes_dir):
    """allreduce-fusion on SGLang 0.5.9: the user added `_is_sm120_supported` to the gate by
    hand, on a line of its own.  The gate op reads someone-else's; apply makes the recipe's
    other edits (the import, the flag) and never adds a second SM120 operand; revert takes
    back only what apply wrote."""
    root = tree("sglang", "0.5.9", links=True)
    fi = tree("flashinfer", "0.6.3", links=True)
    path = root / "sglang/srt/layers/communicator.py"
    text = path.read_text()
    gate = "(_is_sm90_supported or _is_sm100_supported)"
    assert text.count(gate) == 1
    mine = text.replace(
        gate, "(\n            _is_sm90_supported or _is_sm100_supported\n            or _is_sm120_supported\n        )"
    )
    _write(path, mine)
    t = ["--recipes", str(recipes_dir)]
    tg = ["-t", f"sglang={root}", "-t", f"flashinfer={fi}"]
    code, out, err = run_cli(*t, "status", "allreduce-fusion", *tg, "--json")
    ops = json.loads(out)["recipes"][0]["ops"]
    states = {o["index"]: o["state"] for o in ops if o["engine"] == "sglang"}
    assert "someone-else" in states.values(), ops
    code, out, err = run_cli(*t, "apply", "allreduce-fusion", *tg)
    assert code == 0, (out, err)
    after = path.read_text()
    assert after.count("_is_sm120_supported)") + after.count("or _is_sm120_supported\n") == 1, after
    assert "or _is_sm120_supported\n        )" in after  # the user's own lines, as they wrote them
    code, out, err = run_cli(*t, "revert", "allreduce-fusion", *tg)
    assert code == 1 and "someone else made this edit" in err, (out, err)
    assert path.read_text() == after  # nothing of a refused revert is written


# More trees carrying a user's own hand edit of a recipe's goal, each on a real release patchkit
# never touched: (recipe, engine, version, file, the upstream text, the user's own text).
HAND_EDITS = [
    (
        "autotune-cutlass",
        "sglang",
        "0.5.9",
        "sglang/srt/model_executor/model_runner.py",
        '            # "flashinfer_cutlass",\n',
        '            "flashinfer_cutlass",\n',
    ),
    (
        "allreduce-fusion",
        "flashinfer",
        "0.6.3",
        "flashinfer/jit/comm.py",
        "supported_major_versions=[9, 10]",
        "supported_major_versions=[9, 10, 12]",
    ),
    (
        "max-running-requests",
        "sglang",
        "0.5.16",
        "sglang/srt/server_args.py",
        None,
        None,
    ),
]


@pytest.mark.real
@pytest.mark.parametrize(
    "recipe, engine, version, rel, old, new", HAND_EDITS, ids=[h[0] + "-" + h[2] for h in HAND_EDITS]
)
def test_more_hand_edits_are_someone_elses(tree, run_cli, recipes_dir, recipe, engine, version, rel, old, new):
    other = {"sglang": ("flashinfer", "0.6.3"), "flashinfer": ("sglang", "0.5.9")}[engine]
    root = tree(engine, version, links=True)
    peer = tree(*other, links=True)
    path = root / rel
    if old is None:
        mine = _hand_edit(path, "max_running_requests", "1024")
    else:
        text = path.read_text()
        assert text.count(old) == 1, (rel, old)
        mine = text.replace(old, new)
        _write(path, mine)
    t = ["--recipes", str(recipes_dir)]
    tg = ["-t", f"{engine}={root}", "-t", f"{other[0]}={peer}"]
    code, out, err = run_cli(*t, "status", recipe, *tg, "--json")
    ops = [o for o in json.loads(out)["recipes"][0]["ops"] if o["file"] == rel]
    assert ops and all(o["state"] == "someone-else" for o in ops), ops
    code, out, err = run_cli(*t, "revert", recipe, *tg, "--force")
    assert code == 1 and path.read_text() == mine, (out, err)
    code, out, err = run_cli(*t, "apply", recipe, *tg)
    assert path.read_text() == mine, (out, err)  # never written a second time


@pytest.mark.parametrize("how", ["group-writable file", "other-writable directory", "a link"])
def test_a_mirror_others_could_have_planted_is_not_read(mini, tmp_path, how):
    """The mirror may prove an edit patchkit's (and so let revert take it back): one that
    another user could have written, or that is a link, proves nothing (StrictModes)."""
    import os

    root, gate, cli, op = mini
    assert cli("apply", "widen")[0] == 0
    (root / ".patchkit/journal.json").unlink()
    path = journal.mirror_path(root)
    assert op()[1]["state"] == "applied"  # the trusted mirror proves it
    if how == "group-writable file":
        path.chmod(0o620)
    elif how == "other-writable directory":
        path.parent.chmod(0o777)
    else:
        real = tmp_path / "elsewhere.json"
        real.write_bytes(path.read_bytes())
        path.unlink()
        os.symlink(real, path)
    assert journal.read_mirror(root) is None
    assert op()[1]["state"] == "applied?"  # offline: nothing proves it, nothing to compare with


def test_the_mirror_is_kept_where_only_its_owner_can_write_whatever_the_umask(mini):
    import os
    import stat

    root, gate, cli, op = mini
    old = os.umask(0o002)  # a Debian user's personal-group umask
    try:
        assert cli("apply", "widen")[0] == 0
    finally:
        os.umask(old)
    path = journal.mirror_path(root)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert journal.read_mirror(root) is not None
