"""A README line cannot fail as written (issue 32).

Every ```sh block of README.md is marked on the line before it, and a block that is not
fails test_every_shell_block_is_run_or_an_illustration:

* `<!-- run: FLOW -->`: run as written (bash -euo pipefail) inside a fresh `git clone` of
  this checkout, with an empty HOME and XDG directories; it must exit 0.  FLOW names an
  entry of FLOWS below, which makes what the block presumes the user has (checkouts under
  ~/src, a serving venv at /opt/serve: a path the block names becomes the one the test made)
  and says whether it needs real releases (the real tier, patchkit's shared cache, the
  network allowed) or runs offline with an empty cache.
* `<!-- illustration: why -->`: it needs what a test machine has not (a GPU server, the
  fleet's index, the user's tool directory); its `patchkit` lines are still read by
  patchkit's own click parser, so a wrong option fails.

Every command of a block is also checked the cheap way, offline: a `patchkit` line is read
by click's own parser for that (sub)command (an option it does not have, an option without
its value, a missing argument fails), every recipe or bundle it names exists, and every
ENGINE of `-t ENGINE=PATH`, `--from ENGINE==V`, `--to`, `--across` is an engine; `make T`
names a target of the Makefile; `pipx install`, `uv tool install` and `pip install` of a
path name a directory whose pyproject.toml is patchkit's, with extras it defines.  A
command of a run block that the test cannot check fails it.  A `patchkit publish ...
--dry-run` line is also run from the clone, offline with an empty cache: it must stop only
at the release it may not download.

A ```dockerfile block is marked too: run, its shell-form RUN lines run twice (as on a
rebuild over an image they patched); its `RUN`/`CMD` lines that call patchkit are checked as
`patchkit` lines.  A ```toml block that is a recipe (`id = ...`) must pass `patchkit check`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import click
import pytest

from patchkit.base import paths
from patchkit.base.target import ENGINES as ENGINE_SPECS
from patchkit.cli import cli
from patchkit.upstream import fetch
from tests.conftest import PINNED, share_cache_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PATCHKIT = Path(sys.executable).parent / "patchkit"


class Block(NamedTuple):
    lang: str
    text: str
    line: int  # of the opening fence, from 1
    mark: str  # "run", "illustration" or ""
    flow: str = ""  # of a "run" block: the FLOWS entry that sets up what it needs


def blocks(text: str) -> list[Block]:
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        before = lines[k].strip() if k >= 0 else ""
        mark = re.match(r"^<!--\s*(run|illustration)\b:?\s*([\w-]*).*-->$", before)
        kind, flow = (mark.group(1), mark.group(2) if mark.group(1) == "run" else "") if mark else ("", "")
        out.append(Block(m.group(1), "\n".join(lines[i + 1 : j]), i + 1, kind, flow))
        i = j + 1
    return out


README_BLOCKS = blocks(README.read_text(encoding="utf-8"))
SH = [b for b in README_BLOCKS if b.lang in ("sh", "bash", "shell", "console")]
# Blocks of commands: shell, and a Dockerfile's (its RUN lines are shell too).
COMMANDS = SH + [b for b in README_BLOCKS if b.lang == "dockerfile"]


def script(b: Block) -> str:
    """What running the block means: a shell block as it is; a Dockerfile's shell-form RUN
    lines, twice (a rebuild on an image they already patched runs them again)."""
    if b.lang != "dockerfile":
        return b.text
    runs = [m.group(1) for m in re.finditer(r"^RUN\s+([^\[].*)$", b.text, re.M)]
    assert runs, f"README.md:{b.line}: a dockerfile block with no shell-form RUN line to run"
    return "\n".join(runs * 2)


def _engines() -> set[str]:
    return set(tomllib.loads((ROOT / "patchkit/base/engines.toml").read_text()))


def _catalog() -> set[str]:
    """Recipe ids and bundles shipped, and the ids the README itself creates (new, capture)."""
    names: set[str] = set()
    for f in (ROOT / "recipes").glob("*.toml"):
        data = tomllib.loads(f.read_text(encoding="utf-8"))
        names.add(data["id"])
        names.update(data.get("bundles", []))
    for line in README.read_text(encoding="utf-8").splitlines():
        m = re.search(r"\bpatchkit (?:new|capture) ([\w.-]+)", line)
        if m:
            names.add(m.group(1))
    return names


ENGINES = _engines()
CATALOG = _catalog()


def commands(text: str) -> list[list[str]]:
    """The simple commands of a block, as words: comments dropped, lines joined at a trailing
    backslash, split at `&&`, `||`, `;` and `|`; leading VAR=value assignments dropped."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        cmd: list[str] = []
        for w in words + [";"]:
            if w in ("&&", "||", ";", "|"):
                while cmd and re.match(r"^[A-Za-z_]\w*=", cmd[0]):
                    cmd.pop(0)
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    return out


def check_patchkit(args: list[str]) -> None:
    """One `patchkit ARGS` line, read by click's parser of each (sub)command in turn: no
    callbacks run, no value converted, nothing executed."""
    cmd: click.Command = cli
    ctx = click.Context(cli, info_name="patchkit")
    path = "patchkit"
    while True:
        opts, rest, _ = cmd.make_parser(ctx).parse_args(list(args))  # raises on a bad option
        for p in cmd.params:
            value = opts.get(p.name)
            if not isinstance(value, (str, list, tuple)) or not value:  # not given (click 8.2+: UNSET)
                if isinstance(p, click.Argument) and p.required:
                    raise AssertionError(f"`{path}`: {p.human_readable_name} is missing")
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            if isinstance(p, click.Option) and "ENGINE" in (p.metavar or ""):
                for v in values:
                    engine = re.split(r"==|=", v, maxsplit=1)[0]
                    assert engine in ENGINES, f"`{path}` {p.opts[0]} {v}: {engine!r} is no engine"
            if isinstance(p, click.Argument) and p.name == "names":
                for v in values:
                    assert v in CATALOG, f"`{path}`: {v!r} is no recipe or bundle"
            if isinstance(p, click.Argument) and p.name == "engine":
                assert value in ENGINES, f"`{path}`: {value!r} is no engine"
        if not isinstance(cmd, click.Group):
            assert not rest, f"`{path}`: left over {rest}"
            return
        assert rest, f"`{path}`: no subcommand"
        name, args = rest[0], rest[1:]
        sub = cmd.get_command(ctx, name)
        assert sub is not None, f"`{path} {name}`: no such command"
        path += f" {name}"
        cmd, ctx = sub, click.Context(sub, info_name=name, parent=ctx)


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(), re.M))


def check_install(args: list[str]) -> None:
    """`pipx install X`, `uv tool install X`, `pip install X`: a path X must be patchkit's
    project (as run from the clone's root), with the extras it names."""
    paths = [a for a in args if not a.startswith("-") and (a.startswith((".", "/", "~")) or "/" in a)]
    assert paths, f"`{' '.join(args)}`: installs no path this test can check"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for a in paths:
        m = re.match(r"^(.*?)(?:\[([\w,\s-]+)\])?$", a)
        where, extras = (ROOT / m.group(1)).resolve(), m.group(2)
        pyproject = where / "pyproject.toml"
        assert pyproject.is_file(), f"`{a}`: {where} holds no pyproject.toml (run from the clone's root)"
        assert tomllib.loads(pyproject.read_text())["project"]["name"] == "patchkit", f"`{a}` is not patchkit"
        for extra in (extras or "").split(","):
            if extra.strip():
                assert extra.strip() in project["optional-dependencies"], f"`{a}`: no extra {extra!r}"


def check_command(words: list[str]) -> None:
    prog = words[0]
    if prog == "patchkit" or prog.endswith("/patchkit"):
        return check_patchkit(words[1:])
    if prog == "make":
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        assert targets, "`make` without a target"
        missing = set(targets) - _makefile_targets()
        assert not missing, f"`{' '.join(words)}`: no Makefile target {sorted(missing)}"
        return
    if prog == "export":
        assert all(re.match(r"^[A-Za-z_]\w*(=|$)", w) for w in words[1:]), words
        return
    if words[:2] in (["pipx", "install"], ["pip", "install"]) or words[:3] == ["uv", "tool", "install"]:
        return check_install(words)
    raise AssertionError(f"`{' '.join(words)}`: this test cannot check it; run it in a test, or mark the block")


def _blocks_id(b: Block) -> str:
    return f"README.md:{b.line}"


@pytest.mark.parametrize("block", SH, ids=_blocks_id)
def test_each_shell_block_checks(block):
    for words in commands(block.text):
        if block.mark == "illustration" and not (words[0] == "patchkit" or words[0].endswith("/patchkit")):
            continue
        check_command(words)


def _env(tmp: Path, real: bool = False) -> dict[str, str]:
    """An empty HOME and empty XDG directories; offline with an empty cache, or (``real``) the
    network allowed and patchkit's shared cache, so releases the tier downloads are not
    downloaded again."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PATCHKIT_", "XDG_"))}
    if real:
        env.update({k: os.environ[k] for k in fetch.INDEX_ENVS if os.environ.get(k)})
        # pip's own cache too (`make demo` installs patchkit's dependencies into a new venv)
        env["PIP_CACHE_DIR"] = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
    (tmp / "home").mkdir(exist_ok=True)
    for xdg in ("CONFIG", "CACHE", "DATA", "STATE"):
        (tmp / "xdg" / xdg.lower()).mkdir(parents=True, exist_ok=True)
        env[f"XDG_{xdg}_HOME"] = str(tmp / "xdg" / xdg.lower())
    env.update(
        HOME=str(tmp / "home"),
        PATCHKIT_CACHE=str(paths.cache_dir() if real else tmp / "cache"),
        PATH=f"{PATCHKIT.parent}{os.pathsep}{env.get('PATH', '')}",
        NO_COLOR="1",
    )
    if real:
        share_cache_key(tmp / "xdg" / "config")
    else:
        env["PATCHKIT_OFFLINE"] = "1"
    return env


# -- the flows a `<!-- run: FLOW -->` block names ----------------------------------------------
#
# Each block runs as written (bash -euo pipefail), inside a fresh `git clone` of this checkout,
# with an empty HOME and XDG directories.  A flow makes what the block presumes the user has
# (checkouts under ~/src, a serving venv), and says which of the block's words stand for it:
# a path it names (/opt/serve) becomes the one the test made.  Nothing else is changed.  (A
# clone holds what is committed: commit before you run these by hand.)


class Flow(NamedTuple):
    real: bool  # needs real releases (and may use the network): the real tier
    make: Callable[[Path, pytest.FixtureRequest], list[tuple[str, str]]]  # (tmp, request) -> substitutions


def _nothing(tmp: Path, request: pytest.FixtureRequest) -> list[tuple[str, str]]:
    return []


def _two_commands(tmp: Path, request: pytest.FixtureRequest) -> list[tuple[str, str]]:
    # `make test` is this suite: the test asks make for its plan (every target it needs
    # exists, nothing runs); `make demo` runs as written, its venv made from the index.
    return [(r"^make test\b", "make -n test")]


def _checkouts(tmp: Path, request: pytest.FixtureRequest) -> list[tuple[str, str]]:
    """~/src/sglang and ~/src/flashinfer: unpacked pinned releases (a layout -t detects)."""
    tree = request.getfixturevalue("tree")
    for engine in PINNED:
        tree(engine, name=f"home/src/{engine}", links=True)
    return []


def _serving_venv(tmp: Path, request: pytest.FixtureRequest) -> list[tuple[str, str]]:
    """/opt/serve: a venv into which pip installed the pinned SGLang and FlashInfer wheels
    (no dependencies: nothing here imports them)."""
    venv = tmp / "opt" / "serve"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    wheels = [str(fetch.fetch_wheel(ENGINE_SPECS[e].dist, v)) for e, v in PINNED.items()]
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q"]
        + ["--disable-pip-version-check", "--no-deps", "--no-index", *wheels],
        check=True,
        capture_output=True,
    )
    return [("/opt/serve", str(venv))]


FLOWS: dict[str, Flow] = {
    "recipe": Flow(False, _nothing),
    "clone": Flow(True, _two_commands),
    "checkouts": Flow(True, _checkouts),
    "serving-venv": Flow(True, _serving_venv),
}


def _run_param(b: Block):
    flow = FLOWS.get(b.flow)
    marks = [pytest.mark.real, pytest.mark.xdist_group("readme")] if flow and flow.real else []
    return pytest.param(b, id=_blocks_id(b), marks=marks)


def clone(dest: Path, env: dict[str, str]) -> Path:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], env=env, check=True, capture_output=True)
    return dest


def as_run(text: str, subs: list[tuple[str, str]]) -> str:
    for pattern, repl in subs:
        new = re.sub(pattern, repl, text, flags=re.M) if pattern.startswith("^") else text.replace(pattern, repl)
        assert new != text, f"{pattern!r} is not in the block: the flow and the README disagree"
        text = new
    return text


@pytest.mark.parametrize("block", [_run_param(b) for b in COMMANDS if b.mark == "run"])
def test_each_run_block_runs(block, tmp_path, request):
    """Each `<!-- run: FLOW -->` block, as written, in a fresh clone with an empty HOME."""
    assert block.flow in FLOWS, f"README.md:{block.line}: no flow {block.flow!r} (one of {sorted(FLOWS)})"
    flow = FLOWS[block.flow]
    env = _env(tmp_path, real=flow.real)
    text = as_run(script(block), flow.make(tmp_path, request))
    work = clone(tmp_path / "clone", env)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"README.md:{block.line} exits {done.returncode}:\n{done.stdout}{done.stderr}"


def _publish_stops_only_at_the_release(words: list[str], tmp: Path) -> str:
    """Run a `patchkit publish ... --dry-run` line from the clone, offline with an empty
    cache: "" when the one thing it stops at is a release it may not download (every
    check that needs no release passed), else what it said."""
    tmp.mkdir(parents=True)
    done = subprocess.run(
        [str(PATCHKIT), *words[1:]], cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=120
    )
    said = done.stdout + done.stderr
    ok = done.returncode == 2 and "is not in patchkit's cache" in said and len(done.stderr.strip().splitlines()) == 1
    return "" if ok else f"exit {done.returncode}: {said}"


def test_each_publish_dry_run_gets_as_far_as_the_release(tmp_path):
    """The README's `publish ... --dry-run` exited 2 as written: sm120's recipes edit
    FlashInfer too, and it named only `--from sglang==...`.  Each such line now stops only
    where it needs the release's wheel (this test runs offline); the old line does not."""
    lines = [w for b in SH for w in commands(b.text) if w[:2] == ["patchkit", "publish"] and "--dry-run" in w]
    assert lines
    for n, words in enumerate(lines):
        assert _publish_stops_only_at_the_release(words, tmp_path / f"{n}") == "", " ".join(words)
    old = "patchkit publish sm120 --from sglang==0.5.9 --repository-url http://index:8080/ --dry-run".split()
    assert "also edits flashinfer" in _publish_stops_only_at_the_release(old, tmp_path / "old")


@pytest.mark.parametrize("block", [b for b in README_BLOCKS if b.lang == "dockerfile"], ids=_blocks_id)
def test_each_dockerfile_line_that_calls_patchkit_checks(block):
    calls = 0
    for line in block.text.splitlines():
        m = re.match(r"^(RUN|CMD|ENTRYPOINT)\s+(.*)$", line.strip())
        if not m:
            continue
        body = m.group(2)
        words = __import__("json").loads(body) if body.startswith("[") else shlex.split(body, comments=True)
        if words and words[0].endswith("patchkit"):
            check_patchkit(words[1:])
            calls += 1
    assert calls, f"README.md:{block.line}: a dockerfile block that calls no patchkit"


@pytest.mark.parametrize(
    "block", [b for b in README_BLOCKS if b.lang == "toml" and b.text.startswith("id = ")], ids=_blocks_id
)
def test_each_recipe_in_the_readme_passes_check(block, tmp_path):
    rid = tomllib.loads(block.text)["id"]
    (tmp_path / f"{rid}.toml").write_text(block.text + "\n", encoding="utf-8")
    (tmp_path / "work").mkdir()
    done = subprocess.run(
        [str(PATCHKIT), "check", str(tmp_path / f"{rid}.toml")],
        cwd=tmp_path / "work",
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no errors" in done.stdout


def test_every_shell_block_is_run_or_an_illustration():
    """The rule itself: every block that could be shell is one the tests above read (a block
    without a language might be: name it, ```sh or ```text), and every shell or dockerfile
    block is run
    (`<!-- run: FLOW -->`, a flow of FLOWS) or says why it cannot be (`<!-- illustration: why
    -->`): a new block is one or the other, or this fails."""
    assert SH
    for b in README_BLOCKS:
        assert b.lang, f"README.md:{b.line}: a block without a language"
    for b in COMMANDS:
        how = f"`<!-- run: FLOW -->` ({', '.join(FLOWS)}) or `<!-- illustration: why -->`"
        assert b.mark, f"README.md:{b.line}: mark it {how}"
        if b.mark == "run":
            assert b.flow in FLOWS, f"README.md:{b.line}: no flow {b.flow!r} (one of {sorted(FLOWS)})"
    text = "x\n\n```sh\npatchkit list\n```\n\n<!-- run: nope -->\n```sh\npatchkit list\n```\n"
    assert [(b.mark, b.flow) for b in blocks(text)] == [("", ""), ("run", "nope")]


def test_the_readme_leads_with_the_users_flows():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    heads = re.findall(r"^(#{1,3}) (.+)$", text, re.M)
    top = [h for level, h in heads if level == "##"]
    assert top[:3] == ["Two commands", "Install", "User flows"], top  # others may follow the flows
    assert "Links" in top[3:], top
    flows = [h for level, h in heads if level == "###"]
    for want in ("Patch a checkout", "serving venv", "Upgrade", "fleet", "your own recipe"):
        assert any(want in f for f in flows), f"no flow about {want!r}: {flows}"
    two = next(b for b in SH if "make demo" in b.text)
    assert [w[:2] for w in commands(two.text)] == [["make", "demo"], ["make", "test"]]


def test_the_readmes_links_lead_somewhere():
    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"


def test_the_checks_catch_what_a_new_user_hit():
    """The old README's install line, `pipx install ./patchkit` inside a clone, names the
    package directory; an unknown option, a recipe that is not, an engine that is not, a
    target make lacks: each fails the check."""
    bad = [
        ["pipx", "install", "./patchkit"],
        ["pipx", "install", ".[nope]"],
        ["patchkit", "status", "--nope"],
        ["patchkit", "apply", "sm12O"],
        ["patchkit", "apply", "sm120", "-t", "sglan=./x"],
        ["patchkit", "drift", "--across"],
        ["patchkit", "fork", "nope"],
        ["make", "nope"],
        ["curl", "https://example.invalid/"],
    ]
    for words in bad:
        with pytest.raises((AssertionError, click.UsageError)):
            check_command(words)
    check_command(["pipx", "install", "."])
    check_command(["patchkit", "--color", "never", "fork", "status", "-t", "sglang=./x"])
