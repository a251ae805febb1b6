"""The corpus of real published patches (tests/corpus/) against patchkit's verdicts.

tests/corpus/corpus.toml holds edits people published for SGLang, FlashInfer and vLLM (issues,
pull requests, patch files, Dockerfile `sed -i` lines), the recipe op that expresses each, and
the verdict each should get on every release of the axis, written from the releases' code.  The
real tier judges every release of each axis once (`patchkit drift --across ... --json`, all
corpus recipes in one run per engine) and compares every cell: the state; for `upstream` and
`moved`, that patchkit places the op at the evidence (same file, the line inside the scope
patchkit names, or within NEAR lines at module level and in C++); for every cell with
evidence, that the line still reads what the corpus says it does (independently of patchkit).

A cell with `known_wrong` is a disagreement read from the code: a strict xfail, so a cell
patchkit starts getting right fails until its mark is removed.  An entry with `needs` waits
for an op kind or engine patchkit lacks: skipped with that reason while it is lacking, judged
once it exists.  Each recipe is applied to a copy of the release it was written for and
reverted, byte for byte (APPLY_WRONG: the strict xfails of that).

Four synthetic refactors on real trees complete it (the classes a real upgrade brings that
the releases above happen not to): a function moved to a new module with a weak look-alike
left behind, upstream's own applied code moved with no marker, a decoy list, a scope renamed.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from patchkit.base.target import ENGINES
from patchkit.core.ops import KINDS
from patchkit.upstream import drift
from tests.conftest import ROOT, copy_linked
from tests.product.test_truth_table import (
    NEAR,
    TableError,
    _scopes,
    _span,
    _text,
    evidence_tree,
    physical,
    split_location,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

pytestmark = pytest.mark.xdist_group("corpus")

HERE = Path(__file__).parents[1] / "corpus"
CORPUS = HERE / "corpus.toml"
RECIPES = HERE / "recipes"  # recipes patchkit can load today
NEEDS = HERE / "needs"  # recipes for an op kind or engine it lacks
STATES = ("pending", "upstream", "moved", "missing", "ambiguous")

real = pytest.mark.real


# A malformed corpus is refused as a malformed truth table is, by the same release-range
# reader (test_truth_table._span).
CorpusError = TableError


@dataclass(frozen=True)
class Cell:
    entry: str
    recipe: str
    op: int
    engine: str
    release: str
    state: str
    file: str = ""
    line: Optional[int] = None
    shows: str = ""
    absent: str = ""
    known_wrong: str = ""
    needs: str = ""

    @property
    def name(self) -> str:
        return f"{self.entry} ({self.recipe} op #{self.op}) on {self.engine} {self.release}"

    @property
    def evidence(self) -> str:
        return f"{self.file}:{self.line}" if self.file else ""


def _recipe_file(recipe: str) -> Optional[Path]:
    for d in (RECIPES, NEEDS):
        if (d / f"{recipe}.toml").is_file():
            return d / f"{recipe}.toml"
    return None


def load(path: Path = CORPUS) -> tuple[dict, list[dict], list[Cell]]:
    """(releases, entries, cells); CorpusError names what is malformed."""
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    releases, entries, cells, seen = raw.get("releases", {}), raw.get("entry", []), [], set()
    for k, e in enumerate(entries, 1):
        where = f"{path.name} [[entry]] #{k} ({e.get('id')})"
        for key in ("id", "recipe", "op", "engine", "source", "thread", "written_for", "quote"):
            if key not in e:
                raise CorpusError(f"{where}: no {key}")
        if e["id"] in seen:
            raise CorpusError(f"{where}: id {e['id']!r} twice")
        seen.add(e["id"])
        if _recipe_file(e["recipe"]) is None:
            raise CorpusError(f"{where}: no recipe {e['recipe']}.toml in {RECIPES.name}/ or {NEEDS.name}/")
        if not e.get("cell"):
            if not e.get("needs", "").startswith("engine "):
                raise CorpusError(f"{where}: no cells")
            continue
        axis = releases.get(e["engine"])
        if axis is None:
            raise CorpusError(f"{where}: engine {e['engine']!r} has no [releases] list")
        covered: list[str] = []
        for n, row in enumerate(e["cell"], 1):
            at = f"{where} cell #{n}"
            state = row.get("state", "")
            if state not in STATES:
                raise CorpusError(f"{at}: state {state!r} is not one of {', '.join(STATES)}")
            has_ev = "file" in row and ("line" in row or "lines" in row)
            if state == "pending" and (has_ev or "absent" in row):
                raise CorpusError(f"{at}: a pending cell carries no evidence")
            if state != "pending" and not has_ev and not (state == "missing" and row.get("absent")):
                raise CorpusError(f"{at}: a {state} cell carries its evidence: file and line (or `absent` if missing)")
            if has_ev and not row.get("shows"):
                raise CorpusError(f"{at}: evidence says what its line shows")
            vs = _span(axis, row.get("releases", ""), at)
            stray = set(row.get("lines", {})) - set(vs)
            if stray:
                raise CorpusError(f"{at}: lines for releases outside the row: {sorted(stray)}")
            for v in vs:
                if v in covered:
                    raise CorpusError(f"{at}: {v} has two rows")
                covered.append(v)
                cells.append(
                    Cell(
                        e["id"], e["recipe"], e["op"], e["engine"], v, state,
                        row.get("file", ""), row.get("lines", {}).get(v, row.get("line")),
                        row.get("shows", ""), row.get("absent", ""), row.get("known_wrong", ""), e.get("needs", ""),
                    )
                )  # fmt: skip
        if e["written_for"] not in covered:
            raise CorpusError(f"{where}: no cell for the release it was written for ({e['written_for']})")
        if len(covered) < 4 or covered[-1] == e["written_for"]:
            raise CorpusError(f"{where}: cells span at least 4 releases, the one it was written for and later ones")
    return releases, entries, cells


RELEASES, ENTRIES, CELLS = load()


def lacking(needs: str) -> str:
    """Why an entry cannot be judged yet ('' once patchkit has what it needs)."""
    kind = re.fullmatch(r"op kind (\S+)", needs)
    if kind and kind.group(1) not in KINDS:
        return f"needs {needs} (not in patchkit.core.ops.KINDS yet)"
    engine = re.fullmatch(r"engine (\S+)", needs)
    if engine and engine.group(1) not in ENGINES:
        return f"needs {needs} (not in patchkit.base.target.ENGINES yet)"
    return ""


def judged_ids(engine: str) -> list[str]:
    """The corpus recipes of this engine patchkit can judge now (those of `needs` once they load)."""
    ids = {c.recipe for c in CELLS if c.engine == engine and not lacking(c.needs)}
    return sorted(ids)


# -- comparing ---------------------------------------------------------------------------------


def reads(cell: Cell, tree: Path) -> list[str]:
    """The evidence line reads what the corpus says (nothing to do with patchkit)."""
    if not cell.file:
        return []
    path = physical(tree, cell.engine, cell.file)
    if not path.is_file():
        return [f"{cell.name}: evidence file {cell.file} is not in the release"]
    lines = _text(path).splitlines()
    got = lines[cell.line - 1].strip() if cell.line <= len(lines) else "<past the end>"
    if cell.shows not in got:
        return [f"{cell.name}: evidence {cell.evidence} does not show {cell.shows!r}; the line reads {got!r}"]
    return []


def check(cell: Cell, op: Optional[dict], tree: Path) -> list[str]:
    """What is wrong with patchkit's verdict for this cell ([] when it agrees)."""
    ev = f" (evidence {cell.evidence})" if cell.evidence else (f" ({cell.absent})" if cell.absent else "")
    if op is None:
        return [f"{cell.name}: expected {cell.state}{ev}, but patchkit does not report the op"]
    got = f"{op['state']} at {op['location'] or op['file']}" + (f" ({op['message'][:200]})" if op["message"] else "")
    if op["state"] != cell.state:
        return [f"{cell.name}: expected {cell.state}{ev}, got {got}"]
    if cell.state not in ("upstream", "moved"):
        return []
    file, scope, line = split_location(op["location"] or "")
    if file != cell.file:
        return [f"{cell.name}: evidence {cell.evidence} is in another file than patchkit's {got}"]
    path = physical(tree, cell.engine, cell.file)
    if file.endswith(".py") and scope not in ("", "<module>"):
        lo, hi = _scopes(path).get(scope, (0, -1))
        inside = f"{file}::{scope} (lines {lo}-{hi})"
    else:
        lo, hi = (line or 0) - NEAR, (line or 0) + NEAR
        inside = f"{NEAR} lines of {file}:{line}"
    if not lo <= cell.line <= hi:
        return [f"{cell.name}: evidence {cell.evidence} is not inside {inside}, where patchkit has it: {got}"]
    return []


def drift_json(*args: str) -> dict:
    """``patchkit drift ... --json`` in process, from the checkout's root."""
    from patchkit.cli import main

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(ROOT)
        try:
            main(["drift", *args, "--recipes", str(RECIPES), "--json"])
            code = 0
        except SystemExit as e:
            code = e.code
    assert code in (0, 1), out.getvalue()
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def matrix():
    """matrix(engine) -> {release: recipe results}: one `drift --across` per engine and module."""
    runs: dict[str, dict] = {}

    def get(engine: str) -> dict[str, list[dict]]:
        if engine not in runs:
            versions = RELEASES[engine]
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(drift, "index_versions", lambda dist, *_: list(versions))
                doc = drift_json(*judged_ids(engine), "--across", f"{engine}=={versions[0]}..{versions[-1]}")
            assert doc["versions"] == versions
            runs[engine] = doc["matrix"]
        return runs[engine]

    return get


def reported(results: list[dict], recipe: str, op: int) -> Optional[dict]:
    r = next((r for r in results if r["id"] == recipe), None)
    return next((o for o in r["ops"] if o["index"] == op), None) if r else None


def _params(cells, strict_marks: bool = True):
    out = []
    for c in cells:
        marks = []
        if strict_marks and c.known_wrong:
            marks.append(pytest.mark.xfail(strict=True, reason=c.known_wrong))
        out.append(pytest.param(c, id=f"{c.entry}-{c.engine}{c.release}", marks=marks))
    return out


@real
@pytest.mark.parametrize("cell", _params(CELLS))
def test_cell(cell: Cell, matrix):
    why = lacking(cell.needs)
    if why:
        pytest.skip(why)
    results = matrix(cell.engine)[cell.release]
    tree = evidence_tree(cell.engine, cell.release, cell.file)
    problems = check(cell, reported(results, cell.recipe, cell.op), tree)
    assert not problems, "\n".join(problems)


@real
@pytest.mark.parametrize("cell", _params([c for c in CELLS if c.file], strict_marks=False))
def test_evidence_reads_as_written(cell: Cell):
    """Every evidence line, needs and known_wrong cells included: the truth is checked against
    the code, not against patchkit."""
    problems = reads(cell, evidence_tree(cell.engine, cell.release, cell.file))
    assert not problems, "\n".join(problems)


# -- apply and revert where each edit was written ----------------------------------------------


# Recipes that apply wrongly on the release they were written for (patchkit's fault, read in its
# ops): strict xfails, listed in WRONG.md like the known_wrong cells.
APPLY_WRONG: dict[str, str] = {}


def written_where() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(recipe, engine, release it was written for, the states its entries read there), for
    every recipe patchkit can load."""
    out: dict[tuple[str, str, str], list[str]] = {}
    for e in ENTRIES:
        if lacking(e.get("needs", "")):
            continue
        state = next(c.state for c in CELLS if c.entry == e["id"] and c.release == e["written_for"])
        out.setdefault((e["recipe"], e["engine"], e["written_for"]), []).append(state)
    return [(*k, tuple(v)) for k, v in sorted(out.items())]


def _cli(*args: str) -> tuple[int, str]:
    from patchkit.cli import main

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        mp.chdir(ROOT)
        try:
            main([*args, "--recipes", str(RECIPES)])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue()


@real
@pytest.mark.parametrize(
    "recipe,engine,release,states",
    [
        pytest.param(
            *w,
            id=f"{w[0]}-{w[1]}{w[2]}",
            marks=[pytest.mark.xfail(strict=True, reason=APPLY_WRONG[w[0]])] if w[0] in APPLY_WRONG else [],
        )
        for w in written_where()
    ],
)
def test_applies_and_reverts_byte_for_byte_where_written(recipe, engine, release, states, tmp_path):
    """On the release it was written for, each corpus recipe applies (every file it names
    changes) and reverts to the release's bytes.  A recipe whose edit that release never had
    (a published script that matched nothing) is refused with nothing written."""
    tree = copy_linked(drift.release_tree(engine, release), tmp_path / engine)
    with open(RECIPES / f"{recipe}.toml", "rb") as f:
        files = sorted({op["file"] for op in tomllib.load(f)["ops"]})

    def now() -> dict[str, Optional[bytes]]:
        return {f: (p.read_bytes() if (p := physical(tree, engine, f)).is_file() else None) for f in files}

    pristine = now()
    target = ("-t", f"{engine}={tree}")
    code, out = _cli("apply", recipe, *target)
    if set(states) != {"pending"}:
        assert code != 0 and now() == pristine, f"apply exited {code} where the release never had the edit:\n{out}"
        return
    assert code == 0, out
    unchanged = [f for f, b in now().items() if b == pristine[f]]
    assert not unchanged, f"apply exited 0 but left {unchanged} as they were:\n{out}"
    code, out = _cli("revert", recipe, *target)
    assert code == 0, out
    differ = [f for f, b in now().items() if b != pristine[f]]
    assert not differ, f"revert left {differ} unlike the release:\n{out}"


# -- a user's own hand edit of a corpus recipe's goal -------------------------------------------

# (recipe, op, engine, release it was written for, file, the release's text, the user's own
# text): the goal written by hand, in the user's words, on a tree patchkit never touched.
# (tests/core/test_proof.py holds six more such trees, of the bundle's recipes.)
HAND_EDITS = [
    (
        "corpus-vllm41028-oai-triton-sm12x",
        1,
        "vllm",
        "0.22.0",
        "vllm/model_executor/layers/fused_moe/experts/gpt_oss_triton_kernels_moe.py",
        "(9, 0) <= (cap.major, cap.minor) < (11, 0)",
        "(9, 0) <= (cap.major, cap.minor) < (13, 0)",
    ),
    (
        "corpus-vllm43814-group-gemm-sm12x",
        1,
        "vllm",
        "0.22.0",
        "vllm/_custom_ops.py",
        "cuda_device_capability >= 110",
        "cuda_device_capability >= 130",
    ),
    (
        "corpus-fi3170-tmem-sm121",
        1,
        "flashinfer",
        "0.6.8",
        "flashinfer/cute_dsl/attention/compat.py",
        '_TMEM_MAX_ALLOC_COLUMNS_MAP = {"sm_100": 512, "sm_103": 512, "sm_120": 512}',
        '_TMEM_MAX_ALLOC_COLUMNS_MAP = {"sm_100": 512, "sm_103": 512, "sm_120": 512, "sm_121": 512}',
    ),
]


@real
@pytest.mark.parametrize(
    "recipe, index, engine, release, rel, old, new", HAND_EDITS, ids=[f"{h[0]}-{h[2]}{h[3]}" for h in HAND_EDITS]
)
def test_a_users_hand_edit_of_a_corpus_goal_is_someone_elses(recipe, index, engine, release, rel, old, new, tmp_path):
    """The edit made by hand reads someone-else's (never patchkit's `applied`, never
    `pending`); revert, even --force, leaves the user's bytes; apply writes nothing twice."""
    tree = copy_linked(drift.release_tree(engine, release), tmp_path / engine)

    def by_hand(text: str) -> str:
        assert text.count(old) == 1, (rel, old)
        return text.replace(old, new)

    mine = _refactor(tree, rel, by_hand)
    target = ("-t", f"{engine}={tree}")
    code, out = _cli("status", recipe, *target, "--json")
    doc = json.loads(out[out.index("{") :])
    assert _op(doc, recipe, index)["state"] == "someone-else", json.dumps(_op(doc, recipe, index))
    code, out = _cli("revert", recipe, *target, "--force")
    assert code == 1 and (tree / rel).read_text(encoding="utf-8") == mine, out
    code, out = _cli("apply", recipe, *target)
    assert (tree / rel).read_text(encoding="utf-8") == mine, out


# -- synthetic refactors on real trees ---------------------------------------------------------


def _refactor(tree: Path, rel: str, edit) -> str:
    """Rewrite one file of a linked copy (unlink first: never write through into the release)."""
    path = tree / rel
    text = edit(path.read_text(encoding="utf-8"))
    path.unlink()
    path.write_text(text, encoding="utf-8")
    return text


def _op(doc: dict, recipe: str, index: int = 1) -> dict:
    r = next(r for r in doc["recipes"] if r["id"] == recipe)
    return next(o for o in r["ops"] if o["index"] == index)


def _cut(text: str, start: str, end: str) -> tuple[str, str]:
    """(text without the block that begins at ``start`` and ends before ``end``, the block)."""
    i = text.index(start)
    j = text.index(end, i + len(start))
    return text[:i] + text[j:], text[i:j]


SM103 = "def gen_cutlass_fused_moe_sm103_module("
LOOKALIKE = """def gen_cutlass_fused_moe_sm103_legacy_flags() -> list:
    # kept for callers of the old name; SM100 only
    return current_compilation_context.get_nvcc_flags_list(
        supported_major_versions=[10]
    )


"""


@real
def test_synthetic_moved_function_with_a_weak_lookalike_left_behind(tmp_path):
    """FlashInfer 0.6.5: gen_cutlass_fused_moe_sm103_module moves to a new module
    jit/fused_moe_sm103.py; jit/fused_moe.py keeps a weak look-alike (another function with a
    `supported_major_versions=[10]` list).  The op is `moved` to the new module, never to the
    look-alike, never `pending` there."""
    tree = copy_linked(drift.release_tree("flashinfer", "0.6.5"), tmp_path / "fi")
    block = {}

    def move_out(text: str) -> str:
        rest, block["fn"] = _cut(text, SM103, "def gen_cutlass_fused_moe_sm100_module(")
        return rest.replace(
            "def gen_cutlass_fused_moe_sm100_module(", LOOKALIKE + "def gen_cutlass_fused_moe_sm100_module("
        )

    _refactor(tree, "flashinfer/jit/fused_moe.py", move_out)
    (tree / "flashinfer/jit/fused_moe_sm103.py").write_text(
        "from .core import JitSpec\nfrom . import env as jit_env\n"
        "from ..compilation_context import current_compilation_context\n"
        "from .fused_moe import gen_cutlass_fused_moe_module\n\n\n" + block["fn"],
        encoding="utf-8",
    )
    op = _op(drift_json("corpus-fi2847-moe-jit", "--to", f"flashinfer={tree}"), "corpus-fi2847-moe-jit", 1)
    assert "legacy" not in (op["location"] or ""), json.dumps(op)
    assert (op["state"], split_location(op["location"])[:2]) == (
        "moved",
        ("flashinfer/jit/fused_moe_sm103.py", "gen_cutlass_fused_moe_sm103_module"),
    ), json.dumps(op)


@real
def test_synthetic_upstream_code_moved_with_no_marker_is_not_applied(tmp_path):
    """FlashInfer 0.6.12 already has PR #3175's form of is_sm120f_supported.  A refactor (a
    vendor fork, a checkout ahead of its tag) moves the function, unchanged, to a new module
    flashinfer/arch_support.py.  `status` on that tree, whose pristine reference is the real
    0.6.12 wheel, must not call upstream's own code `applied` (nor offer to revert it)."""
    tree = copy_linked(drift.release_tree("flashinfer", "0.6.12"), tmp_path / "fi")
    block = {}

    def move_out(text: str) -> str:
        rest, block["fn"] = _cut(text, "def is_sm120f_supported(", "\ndef ")
        return rest + "\nfrom .arch_support import is_sm120f_supported  # noqa: E402\n"

    _refactor(tree, "flashinfer/utils.py", move_out)
    (tree / "flashinfer/arch_support.py").write_text(
        "import torch\n\nfrom .utils import get_compute_capability, version_at_least\n\n\n" + block["fn"],
        encoding="utf-8",
    )
    from patchkit.cli import main

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(ROOT)
        try:
            main(
                [
                    "status",
                    "corpus-fi3175-sm120f-family",
                    "--recipes",
                    str(RECIPES),
                    "-t",
                    f"flashinfer={tree}",
                    "--json",
                ]
            )
        except SystemExit:
            pass
    doc = json.loads(out.getvalue())
    op = _op(doc, "corpus-fi3175-sm120f-family")
    assert op["state"] != "applied", op
    assert op["state"] == "upstream", json.dumps(op)
    assert op["location"].startswith("flashinfer/arch_support.py::is_sm120f_supported"), json.dumps(op)


def _decoy(text: str) -> str:
    site = (
        "        if is_draft_model and self.hf_config.architectures[0] in [\n"
        '            "DeepseekV3ForCausalLM",\n'
        '            "GlmMoeDsaForCausalLM",\n'
        "        ]:\n"
        '            self.hf_config.architectures[0] = "DeepseekV3ForCausalLMNextN"\n'
    )
    assert text.count(site) == 1
    text = text.replace(
        site,
        "        arch = self.hf_config.architectures[0]\n"
        "        if is_draft_model and arch in _NEXTN_OF:\n"
        "            self.hf_config.architectures[0] = _NEXTN_OF[arch]\n",
    )
    return text.replace(
        "class ModelConfig:",
        "_NEXTN_OF = {\n"
        '    "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLMNextN",\n'
        '    "GlmMoeDsaForCausalLM": "DeepseekV3ForCausalLMNextN",\n'
        "}\n\n# Architectures whose checkpoints ship an MTP layer (for logging only).\n"
        '_LOGGED_MTP_ARCHS = [\n    "DeepseekV3ForCausalLM",\n    "GlmMoeDsaForCausalLM",\n]\n\n\n'
        "class ModelConfig:",
        1,
    )


@real
def test_synthetic_decoy_list_is_not_the_site(tmp_path):
    """SGLang 0.5.9: the draft-architecture list of ModelConfig._config_draft_model becomes a
    dict (the list-element op has nothing left to edit), and a decoy list with the same two
    strings appears at module level for logging.  The op reads `missing`: the decoy is neither
    `pending` nor where it `moved`."""
    tree = copy_linked(drift.release_tree("sglang", "0.5.9"), tmp_path / "sg")
    _refactor(tree, "sglang/srt/configs/model_config.py", _decoy)
    op = _op(drift_json("corpus-slime059-draft-arch", "--to", f"sglang={tree}"), "corpus-slime059-draft-arch")
    assert op["state"] == "missing", json.dumps(op)


@real
def test_synthetic_scope_renamed_reads_moved(tmp_path):
    """SGLang 0.5.14: LogitsProcessor._get_pruned_states is renamed _select_pruned_states (its
    def and its callers).  TorchSpec's or-operand reads `moved` to the renamed method."""
    tree = copy_linked(drift.release_tree("sglang", "0.5.14"), tmp_path / "sg")
    text = _refactor(
        tree,
        "sglang/srt/layers/logits_processor.py",
        lambda t: t.replace("_get_pruned_states", "_select_pruned_states"),
    )
    assert "_select_pruned_states" in text
    op = _op(drift_json("corpus-torchspec0514-logits", "--to", f"sglang={tree}"), "corpus-torchspec0514-logits", 2)
    assert (op["state"], split_location(op["location"])[:2]) == (
        "moved",
        ("sglang/srt/layers/logits_processor.py", "LogitsProcessor._select_pruned_states"),
    ), json.dumps(op)


# -- the corpus's own checks (offline) ---------------------------------------------------------


def other_words_cells() -> list[str]:
    """The cells where upstream reached the edit's goal in other words (a row's `other_words`
    says how): a gate that admits 12.x by another expression, a helper with another body."""
    out = []
    for e in ENTRIES:
        for row in e.get("cell", []):
            if row.get("other_words"):
                assert row["state"] == "upstream", (e["id"], row)
                out += [f"{e['id']} {v}" for v in _span(RELEASES[e["engine"]], row["releases"], e["id"])]
    return out


def test_the_corpus_has_its_figures():
    """At least 51 edits from at least 22 sources, 5 of them for vLLM, and at least 15 cells
    where upstream reached the goal in other words; every recipe it names loads or waits for
    what it needs; few entries wait for an op kind, none for an engine."""
    sources = {e["source"] for e in ENTRIES}
    threads = {re.sub(r"/blob/.*|/(issues|pull)/\d+.*", "", e["source"]) for e in ENTRIES}
    assert len(ENTRIES) >= 51 and len(sources) >= 22, (len(ENTRIES), len(sources))
    assert len(other_words_cells()) >= 15, other_words_cells()
    assert len(threads) >= 5
    assert sum(e["engine"] == "vllm" for e in ENTRIES) >= 5
    assert sum(e.get("needs", "").startswith("op kind") for e in ENTRIES) <= 5
    assert not [e["id"] for e in ENTRIES if lacking(e.get("needs", "")).startswith("needs engine")]
    for e in ENTRIES:
        assert (_recipe_file(e["recipe"]).parent == RECIPES) == (not e.get("needs")), e["id"]


def test_every_corpus_recipe_passes_check():
    """`patchkit check` accepts every recipe of tests/corpus/recipes/ (and refuses the one in
    needs/, for the op kind it names)."""
    code, out = _cli("check", *map(str, sorted(RECIPES.glob("*.toml"))))
    assert code == 0, out
    for path in sorted(NEEDS.glob("*.toml")):
        code, out = _cli("check", str(path))
        assert code != 0 and "unknown op kind" in out, out


def _bad(tmp_path: Path, body: str) -> str:
    p = tmp_path / "c.toml"
    p.write_text('[releases]\nsglang = ["1", "2", "3", "4", "5"]\n' + body)
    with pytest.raises(CorpusError) as e:
        load(p)
    return str(e.value)


ENTRY = (
    '[[entry]]\nid = "x"\nrecipe = "corpus-slime059-kvargs"\nop = 1\nengine = "sglang"\n'
    'source = "s"\nthread = "t"\nwritten_for = "1"\nquote = "q"\n'
)


@pytest.mark.parametrize(
    "body,message",
    [
        (ENTRY + '[[entry.cell]]\nreleases = "1..6"\nstate = "pending"\n', "'6' is not in [releases]"),
        (ENTRY + '[[entry.cell]]\nreleases = "1..5"\nstate = "done"\n', "state 'done' is not one of"),
        (ENTRY + '[[entry.cell]]\nreleases = "1..5"\nstate = "upstream"\n', "carries its evidence"),
        (ENTRY + '[[entry.cell]]\nreleases = "1..5"\nstate = "moved"\nabsent = "gone"\n', "carries its evidence"),
        (ENTRY + '[[entry.cell]]\nreleases = "1..5"\nstate = "pending"\nfile = "a.py"\nline = 3\n', "no evidence"),
        (
            ENTRY + '[[entry.cell]]\nreleases = "1..5"\nstate = "missing"\nfile = "a.py"\nline = 3\n',
            "says what its line shows",
        ),
        (ENTRY + '[[entry.cell]]\nreleases = "1..3"\nstate = "pending"\n', "at least 4 releases"),
        (
            ENTRY + '[[entry.cell]]\nreleases = "2..5"\nstate = "pending"\n',
            "no cell for the release it was written for",
        ),
        (
            ENTRY.replace('written_for = "1"', 'written_for = "5"')
            + '[[entry.cell]]\nreleases = "1..5"\nstate = "pending"\n',
            "and later ones",
        ),
        (
            ENTRY.replace("corpus-slime059-kvargs", "nope") + '[[entry.cell]]\nreleases = "1..5"\n',
            "no recipe nope.toml",
        ),
        (ENTRY, "no cells"),
        (
            ENTRY + '[[entry.cell]]\nreleases = "1..5"\nstate = "pending"\n[[entry.cell]]\nreleases = "5"\n'
            'state = "pending"\n',
            "5 has two rows",
        ),
    ],
    ids=[
        "unknown",
        "state",
        "no-evidence",
        "moved-absent",
        "pending-evidence",
        "no-shows",
        "short",
        "no-written-for",
        "nothing-later",
        "no-recipe",
        "no-cells",
        "overlap",
    ],
)
def test_a_malformed_corpus_is_refused(tmp_path, body, message):
    assert message in _bad(tmp_path, body)


def test_lacking_names_what_is_missing_until_it_exists():
    assert lacking("op kind replace-expr") == ""
    assert lacking("op kind no-such-kind") == "needs op kind no-such-kind (not in patchkit.core.ops.KINDS yet)"
    assert lacking("engine sglang") == ""
    assert "not in patchkit.base.target.ENGINES" in lacking("engine no-such-engine")


def test_wrong_md_lists_every_known_wrong_cell():
    """tests/corpus/WRONG.md (the judge's worklist) names each known_wrong cell: its entry and
    release on one row."""
    rows = [line for line in (HERE / "WRONG.md").read_text().splitlines() if line.startswith("| ")]
    missing = [
        c.name
        for c in CELLS
        if c.known_wrong
        and not any(f"{c.entry} " in r and re.search(rf"\b{re.escape(c.release)}\b(?!\.post)", r) for r in rows)
    ]
    missing += [k for k in APPLY_WRONG if not any(row.startswith(f"| {k} |") for row in rows)]
    assert not missing, missing
