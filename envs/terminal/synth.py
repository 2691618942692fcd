"""Procedurally generated terminal tasks: a setup script, an instruction, a verifier, a solution.

Six families, each a handful of templates filled with concrete random names, numbers and file
contents: `text` (grep/cut/sort/sed over generated logs, CSVs and config trees), `files`
(find by size or extension, move by name), `permissions` (chmod and run, exact modes, world-
writable files), `archives` (create an exact .tar.gz, extract one and compute from it), `git`
(first commit, branch + commit, which commit last touched a file) and `processes` (write a
script with given argument handling, find the executable that exits with a given status).

What a caller may rely on:
- determinism: task i of a seed comes from `random.Random(f"{seed}:{i}")` (and the family
  order of its block of six from `f"{seed}:order:{i // 6}"`), so the same seed gives the same
  tasks in the same order in every process, and `generate(seed, n)` is a prefix of
  `task_stream(seed)`;
- every block of six consecutive tasks holds each family once;
- scripts need only bash, coreutils, findutils, grep, sed, awk, tar, gzip, git and procps; they
  run as a non-root user with /work and /tmp writable, no network, and never read the clock,
  $RANDOM or the hostname (git dates are fixed in setup);
- each verifier checks exact contents, modes or git state, fails on the untouched setup
  state, and passes after the reference solution (`Task.answer`); tests run all three in a
  real sandbox.

Over ~400 lines, for a reason: task templates, which are closer to data than to logic: one
generator per family, side by side.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Iterator

from skyhub.errors import UsageError
from skyhub.task import Task

FAMILIES = ("text", "files", "permissions", "archives", "git", "processes")
TIMEOUT_S = 600.0
SOURCE = "skyhub terminal synth"
EOF = "SKYHUB_EOF"

WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "glade", "harbor", "indigo",
         "juniper", "kestrel", "lagoon", "maple", "nectar", "onyx", "pepper", "quartz", "raven",
         "saffron", "tundra", "umber", "violet", "willow", "yarrow", "zephyr")
NAMES = ("Ada", "Bela", "Chen", "Dara", "Emil", "Fatima", "Goran", "Hana", "Ivo", "Jonas",
         "Kira", "Lars", "Mina", "Nils", "Olga", "Priya", "Rui", "Sven", "Tara", "Umar")
CITIES = ("Bergen", "Cairo", "Dakar", "Lima", "Lyon", "Malmo", "Osaka", "Porto", "Quito",
          "Riga", "Tartu", "Turin", "Split", "Zagreb")
TEAMS = ("billing", "core", "data", "growth", "infra", "mobile", "search", "security", "web")
PLANS = ("basic", "business", "enterprise", "free", "premium", "starter", "team")
COMPONENTS = ("api", "auth", "cache", "db", "mailer", "queue", "scheduler", "worker")
MESSAGES = ("request {n} served in {m} ms", "retrying job {n} after {m} ms",
            "connection pool at {n} of {m}", "user {n} logged in from zone {m}",
            "flushed {n} entries in {m} ms", "heartbeat {n} lag {m} ms")

Parts = tuple[str, str, str, str]  # prompt, setup, verify, solution

# Shared by every verifier: `fail` explains itself on stdout; `expect_file PATH <<EOF` wants
# the exact content (a missing final newline is forgiven); `expect_run CMD...` wants exit 0 and
# the exact stdout; `expect_mode PATH MODE` the exact octal mode.
VERIFY_LIB = """\
fail() { echo "FAIL: $*"; exit 1; }
expect_text() {  # $1: what is checked; $2: got; stdin: the exact wanted text
  local want; want=$(cat; echo .); want=${want%.}
  [ "$2" = "$want" ] || [ "$2"$'\\n' = "$want" ] || fail "$1 is not as expected"
}
expect_file() {
  [ -f "$1" ] || fail "$1 does not exist or is not a regular file"
  local got; got=$(cat -- "$1"; echo .); expect_text "$1" "${got%.}"
}
expect_run() {
  local got; got=$("$@"; rc=$?; echo .; exit $rc) || fail "'$*' exited with status $?"
  expect_text "the output of '$*'" "${got%.}"
}
expect_mode() {
  [ -e "$1" ] || fail "$1 does not exist"
  [ "$(stat -c %a -- "$1")" = "$2" ] || fail "$1 has mode $(stat -c %a -- "$1"), not $2"
}
"""


def _q(s: str) -> str:
    return shlex.quote(s)


def _heredoc(content: str) -> str:
    """`<<'EOF'` text for `content` (which must end with a newline and never hold the
    delimiter line): the bytes arrive exactly as given, nothing is expanded."""
    assert content.endswith("\n") and f"\n{EOF}\n" not in f"\n{content}", content
    return f"<<'{EOF}'\n{content}{EOF}\n"


def _write(path: str, content: str) -> str:
    """A setup line that creates `path` (and its directory) holding exactly `content`."""
    d = path.rsplit("/", 1)[0]
    return f"mkdir -p {_q(d)}\ncat > {_q(path)} {_heredoc(content)}"


def _expect_file(path: str, content: str) -> str:
    return f"expect_file {_q(path)} {_heredoc(content)}"


def _expect_run(argv: list[str], out: str) -> str:
    return f"expect_run {' '.join(_q(a) for a in argv)} {_heredoc(out) if out else '< /dev/null'}"


def _lines(items: list[str]) -> str:
    return "".join(f"{x}\n" for x in items)


def _csort(items: list[str]) -> list[str]:
    """Byte order, as `LC_ALL=C sort` sorts (all our names are ASCII)."""
    return sorted(items, key=lambda s: s.encode())


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _names(rng: random.Random, k: int, pool: tuple[str, ...] = WORDS) -> list[str]:
    return rng.sample(pool, k)


# -- text -------------------------------------------------------------------------------------
def text_count(rng: random.Random) -> Parts:
    log = f"/work/logs/{_word(rng)}.log"
    comps = _names(rng, 4, COMPONENTS)
    level, comp = rng.choice(("WARN", "ERROR", "INFO")), comps[0]
    n = rng.randint(40, 80)
    forced = set(rng.sample(range(n), 2))  # at least two matches
    lines, t = [], rng.randrange(3600)
    for i in range(n):
        t += rng.randint(1, 90)
        lv, c = rng.choice(("DEBUG", "INFO", "WARN", "ERROR")), rng.choice(comps)
        if i in forced:
            lv, c = level, comp
        msg = rng.choice(MESSAGES).format(n=rng.randint(1, 999), m=rng.randint(1, 999))
        lines.append((f"2024-05-{1 + t // 86400:02d} {t // 3600 % 24:02d}:{t // 60 % 60:02d}:"
                      f"{t % 60:02d} {lv} [{c}] {msg}", lv == level and c == comp))
    count = sum(hit for _, hit in lines)
    prompt = (f"The log {log} has one event per line: `DATE TIME LEVEL [COMPONENT] MESSAGE`. "
              f"Count the lines whose LEVEL is {level} and whose COMPONENT is {comp}, and write "
              "that number in decimal, followed by a newline, to /work/answer.txt.")
    setup = _write(log, _lines([s for s, _ in lines]))
    verify = _expect_file("/work/answer.txt", f"{count}\n")
    solution = f"grep -cF {_q(f' {level} [{comp}] ')} {_q(log)} > /work/answer.txt\n"
    return prompt, setup, verify, solution


def text_csv_unique(rng: random.Random) -> Parts:
    path = f"/work/data/{_word(rng)}-accounts.csv"
    cols = {"city": CITIES, "team": TEAMS, "plan": PLANS}
    header = ["id", "name", *rng.sample(sorted(cols), 3)]
    col = rng.choice(header[2:])
    rows = [[str(1000 + i), rng.choice(NAMES)] + [rng.choice(cols[h]) for h in header[2:]]
            for i in range(rng.randint(20, 40))]
    out = f"/work/{col}-values.txt"
    values = _csort(sorted({r[header.index(col)] for r in rows}))
    prompt = (f"{path} is a comma-separated file whose first line is a header. Write the "
              f"distinct values of its `{col}` column to {out}, one per line, sorted in byte "
              "order (as `LC_ALL=C sort` sorts), without the header and without duplicates.")
    setup = _write(path, _lines([",".join(header)] + [",".join(r) for r in rows]))
    verify = _expect_file(out, _lines(values))
    k = header.index(col) + 1
    solution = f"tail -n +2 {_q(path)} | cut -d, -f{k} | LC_ALL=C sort -u > {_q(out)}\n"
    return prompt, setup, verify, solution


def text_replace(rng: random.Random) -> Parts:
    a, b = _names(rng, 2)
    old, new = f"{a}-{rng.randint(10, 99)}.internal", f"{b}-{rng.randint(100, 999)}.internal"
    root = "/work/config"
    files: dict[str, str] = {}
    for svc in _names(rng, rng.randint(3, 4), COMPONENTS):
        keys = [f"port = {rng.randint(1024, 9999)}", f"host = {old}",
                f"workers = {rng.randint(1, 16)}", f"# upstream {old} (primary)",
                f"fallback = {old}:{rng.randint(1024, 9999)}"]
        picked = rng.sample(keys, rng.randint(3, 5))
        files[f"{svc}/{svc}.conf"] = _lines([*picked, f"host = {old}"])
        if rng.random() < 0.5:
            files[f"{svc}/extra/limits.conf"] = _lines([f"peer = {old}", "max = 10"])
    decoys = {"README.txt": f"Hosts are named like {old}.\n",
              f"{rng.choice(sorted(files))}.bak": f"host = {old}\n",
              "plain.conf": f"port = {rng.randint(1024, 9999)}\n"}
    prompt = (f"Under {root} (at any depth) replace every occurrence of the text `{old}` with "
              f"`{new}` in every regular file whose name ends in `.conf`. Files whose names do "
              "not end in `.conf` must stay exactly as they are.")
    setup = "\n".join(_write(f"{root}/{p}", c) for p, c in {**files, **decoys}.items())
    verify = "\n".join([*(_expect_file(f"{root}/{p}", c.replace(old, new))
                          for p, c in files.items()),
                        *(_expect_file(f"{root}/{p}", c) for p, c in decoys.items())])
    pattern = old.replace(".", r"\.")
    solution = (f"find {root} -type f -name '*.conf' -exec sed -i 's/{pattern}/{new}/g' {{}} +\n")
    return prompt, setup, verify, solution


# -- files ------------------------------------------------------------------------------------
def files_large(rng: random.Random) -> Parts:
    root = f"/work/{_word(rng)}-files"
    limit = rng.choice((1000, 1500, 2048, 4096))
    sizes = {}
    for i, w in enumerate(_names(rng, rng.randint(7, 10))):
        d = rng.choice(("", "a/", "a/b/", "c/"))
        sizes[f"{d}{w}.{rng.choice(('bin', 'dat', 'txt'))}"] = (
            limit if i == 0 else limit + 1 if i == 1 else rng.randint(0, 2 * limit))
    big = _csort([p for p, s in sizes.items() if s > limit])
    out = "/work/large.txt"
    prompt = (f"List the regular files under {root} (at any depth) whose size is strictly "
              f"greater than {limit} bytes. Write their paths relative to {root} (like "
              f"`a/b/name.dat`), one per line, sorted in byte order (`LC_ALL=C sort`), to {out}.")
    setup = "\n".join(f"mkdir -p {_q(root + '/' + p.rpartition('/')[0])}\n"
                      f"head -c {s} /dev/zero | tr '\\0' x > {_q(root + '/' + p)}"
                      for p, s in sizes.items())
    verify = _expect_file(out, _lines(big))
    solution = (f"cd {root} && find . -type f -size +{limit}c | sed 's|^\\./||' "
                f"| LC_ALL=C sort > {out}\n")
    return prompt, setup, verify, solution


def files_by_extension(rng: random.Random) -> Parts:
    root = "/work/docs"
    exts = ["md", "txt", "log", "csv", "json"]
    ext = rng.choice(exts)
    files = {}
    for w in _names(rng, rng.randint(8, 12)):
        d = rng.choice(("", "notes/", "notes/old/", "misc/"))
        files[f"{d}{w}.{rng.choice(exts)}"] = f"{w}\n"
    files[f"misc/{_word(rng)}-{rng.randint(1, 9)}.{ext}"] = "x\n"  # at least one hit
    files[f"{_word(rng)}.{ext}.bak"] = "backup\n"
    names = _csort([p.rpartition("/")[2] for p in files if p.endswith(f".{ext}")])
    if len(set(names)) != len(names):  # a name twice in two dirs: keep the question exact
        return files_by_extension(rng)
    out = f"/work/{ext}-files.txt"
    prompt = (f"Find every regular file under {root} (at any depth) whose name ends in "
              f"`.{ext}`. Write their names without directories, one per line, sorted in byte "
              f"order (`LC_ALL=C sort`), to {out}. Directories do not count.")
    setup = "\n".join([f"mkdir -p {root}/archive.{ext}/inner"] +
                      [_write(f"{root}/{p}", c) for p, c in files.items()])
    verify = _expect_file(out, _lines(names))
    solution = f"find {root} -type f -name '*.{ext}' -printf '%f\\n' | LC_ALL=C sort > {out}\n"
    return prompt, setup, verify, solution


def files_move(rng: random.Random) -> Parts:
    prefix, other1, other2 = _names(rng, 3, ("report", "invoice", "draft", "memo", "scan"))
    dest = f"/work/{prefix}s"
    files = {}
    for p in (prefix, prefix, prefix, other1, other2, other1):
        files[f"{p}-{_word(rng)}-{rng.randint(1, 99)}.txt"] = f"{p} {rng.randint(1, 9999)}\n"
    files[f"old-{prefix}-{rng.randint(1, 9)}.txt"] = "keep me\n"
    moved = {n for n in files if n.startswith(f"{prefix}-")}
    prompt = (f"Create the directory {dest} and move into it every file directly inside "
              f"/work/inbox whose name starts with `{prefix}-`. Leave every other file in "
              "/work/inbox, and do not change any file's name or contents.")
    setup = "\n".join(_write(f"/work/inbox/{n}", c) for n, c in files.items())
    def listing(d: str, names: list[str]) -> str:
        return _expect_run(["sh", "-c", 'ls -A "$0" | LC_ALL=C sort', d], _lines(_csort(names)))

    verify = "\n".join([listing(dest, list(moved)),
                        listing("/work/inbox", [n for n in files if n not in moved])] +
                       [_expect_file(f"{dest if n in moved else '/work/inbox'}/{n}", c)
                        for n, c in files.items()])
    solution = f"mkdir -p {dest} && mv /work/inbox/{prefix}-* {dest}/\n"
    return prompt, setup, verify, solution


# -- permissions ------------------------------------------------------------------------------
def permissions_run(rng: random.Random) -> Parts:
    name, label = _names(rng, 2)
    script, out = f"/work/bin/{name}.sh", f"/work/{name}-output.txt"
    n, k = rng.randint(3, 7), rng.randint(2, 9)
    body = (f'#!/bin/bash\n[ -x "$0" ] || {{ echo "run me as an executable" >&2; exit 1; }}\n'
            f"total=0\nfor i in $(seq 1 {n}); do\n  total=$((total + i * {k}))\n"
            f'  echo "{label} $i $total"\ndone\n')
    expected, total = [], 0
    for i in range(1, n + 1):
        total += i * k
        expected.append(f"{label} {i} {total}")
    prompt = (f"Make the script {script} executable (by its owner, at least), then run it as "
              f"an executable and save its standard output to {out}.")
    setup = _write(script, body) + f"chmod 644 {script}"
    verify = "\n".join([f"[ -x {script} ] || fail '{script} is not executable'",
                        _expect_file(script, body), _expect_file(out, _lines(expected))])
    solution = f"chmod u+x {script} && {script} > {out}\n"
    return prompt, setup, verify, solution


def permissions_modes(rng: random.Random) -> Parts:
    root = f"/work/{_word(rng)}-share"
    f1, f2 = (f"{w}.{e}" for w, e in zip(_names(rng, 2), ("key", "cfg"), strict=True))
    d = rng.choice(("private", "keys", "vault", "secrets"))
    targets = {f"{root}/{d}": rng.choice(("700", "750", "710", "770")),
               f"{root}/{d}/{f1}": rng.choice(("600", "640", "400", "440")),
               f"{root}/{f2}": rng.choice(("640", "660", "600", "664"))}
    prompt = ("Set these exact permission modes (octal, as `stat -c %a` prints them): " +
              "; ".join(f"{p} to {m}" for p, m in targets.items()) + ".")
    setup = "\n".join([_write(f"{root}/{d}/{f1}", "secret\n"), _write(f"{root}/{f2}", "x=1\n"),
                       f"chmod 755 {root}/{d}", f"chmod 644 {root}/{d}/{f1} {root}/{f2}"])
    verify = "\n".join(f"expect_mode {p} {m}" for p, m in targets.items())
    # Files first: a directory without read permission for us would still be traversable
    # (every mode keeps owner x), but keep the order that always works.
    solution = "\n".join(f"chmod {m} {p}" for p, m in reversed(targets.items())) + "\n"
    return prompt, setup, verify, solution


def permissions_world_writable(rng: random.Random) -> Parts:
    root = "/work/share"
    modes = {}
    for w in _names(rng, rng.randint(6, 9)):
        modes[f"{rng.choice(('', 'pub/', 'pub/tmp/'))}{w}.txt"] = rng.choice(
            ("644", "664", "666", "646", "600", "777", "755", "775"))
    modes[f"pub/{_word(rng)}-{rng.randint(1, 9)}.sh"] = "777"  # at least one
    modes[f"{_word(rng)}-{rng.randint(10, 99)}.txt"] = "664"  # group-writable only
    ww = _csort([p for p, m in modes.items() if int(m, 8) & 0o002])
    out = "/work/world-writable.txt"
    prompt = (f"Some regular files under {root} (at any depth) are writable by others "
              f"(world-writable). Write their paths relative to {root}, one per line, sorted in "
              f"byte order (`LC_ALL=C sort`), to {out}. Then remove the write permission for "
              "others from exactly those files, keeping every other permission bit as it is.")
    setup = "\n".join(_write(f"{root}/{p}", f"{p}\n") + f"chmod {m} {root}/{p}"
                      for p, m in modes.items())
    verify = "\n".join([_expect_file(out, _lines(ww))] +
                       [f"expect_mode {root}/{p} {int(m, 8) & ~0o002:o}" for p, m in modes.items()])
    solution = (f"cd {root} && find . -type f -perm -o+w | sed 's|^\\./||' | LC_ALL=C sort > {out}"
                f" && find . -type f -perm -o+w -exec chmod o-w {{}} +\n")
    return prompt, setup, verify, solution


# -- archives ---------------------------------------------------------------------------------
def archives_create(rng: random.Random) -> Parts:
    proj = f"{_word(rng)}-app"
    files = {f"{w}/{rng.choice(WORDS)}.{rng.choice(('py', 'txt', 'cfg'))}":
             f"{w} {rng.randint(1, 999)}\n" for w in _names(rng, 4)}
    files["README.md"] = f"# {proj}\n"
    tmp = {f"{rng.choice(sorted(files)).rpartition('/')[0] or 'x'}/cache-{i}.tmp": "junk\n"
           for i in range(rng.randint(1, 3))}
    tmp["build.tmp"] = "junk\n"
    out = f"/work/{proj}.tar.gz"
    prompt = (f"Create the gzip-compressed tar archive {out} of the directory /work/{proj}, "
              f"leaving out every file whose name ends in `.tmp`. Member paths must start with "
              f"`{proj}/` (so that extracting it in an empty directory creates `{proj}/...`) "
              "and the archive must contain nothing else.")
    setup = "\n".join(_write(f"/work/{proj}/{p}", c) for p, c in {**files, **tmp}.items())
    verify = "\n".join(
        [f"[ -f {out} ] || fail '{out} does not exist'",
         f"gzip -t {out} 2>/dev/null || fail '{out} is not gzip-compressed'",
         "t=$(mktemp -d)", f"tar -xzf {out} -C \"$t\" || fail 'cannot extract {out}'",
         _expect_run(["sh", "-c", 'cd "$0" && find . -type f | LC_ALL=C sort', "$t"],
                     _lines(_csort([f"./{proj}/{p}" for p in files])))] +
        [f'expect_file "$t"/{_q(f"{proj}/{p}")} {_heredoc(c)}' for p, c in files.items()])
    verify = verify.replace("'$t'", '"$t"')  # the directory is only known when it runs
    solution = f"cd /work && tar -czf {out} --exclude='*.tmp' {proj}\n"
    return prompt, setup, verify, solution


def archives_extract(rng: random.Random) -> Parts:
    name = f"{_word(rng)}-records"
    files: dict[str, str] = {}
    for w in _names(rng, rng.randint(4, 7)):
        d = rng.choice(("", "q1/", "q2/", "q2/late/"))
        nums = [rng.randint(-50, 500) for _ in range(rng.randint(2, 6))]
        files[f"{d}{w}.{rng.choice(('dat', 'dat', 'txt'))}"] = _lines([str(x) for x in nums])
    files[f"q1/{_word(rng)}-extra.dat"] = f"{rng.randint(1, 99)}\n"
    out = "/work/answer.txt"
    archive = f"/work/{name}.tar.gz"
    if rng.random() < 0.5:
        total = sum(int(x) for p, c in files.items() if p.endswith(".dat") for x in c.split())
        ask = ("every file in it whose name ends in `.dat` holds one integer per line. Write "
               f"the sum of all those integers (in decimal, followed by a newline) to {out}.")
        answer = f"{total}\n"
        compute = ("find /tmp/x -type f -name '*.dat' -exec cat {} + "
                   f"| awk '{{s += $1}} END {{print s}}' > {out}")
    else:
        code = f"CODE-{rng.randint(10000, 99999)}"
        target = rng.choice(sorted(files))
        files[target] += f"# {code}\n"
        ask = (f"exactly one file in it contains the text `{code}`. Write that file's path "
               f"inside the archive, without the leading `{name}/` (like `q1/x.dat`), followed "
               f"by a newline, to {out}.")
        answer = f"{target}\n"
        compute = (f"cd /tmp/x/{name} && grep -rlF {code} . | sed 's|^\\./||' > {out}")
    prompt = f"{archive} is a gzip-compressed tar archive of a directory `{name}/`; {ask}"
    setup = "\n".join([_write(f"/work/.build/{name}/{p}", c) for p, c in files.items()] +
                      [f"tar -czf {archive} -C /work/.build {name}", "rm -rf /work/.build"])
    verify = _expect_file(out, answer)
    solution = f"mkdir -p /tmp/x && tar -xzf {archive} -C /tmp/x && {compute}\n"
    return prompt, setup, verify, solution


# -- git --------------------------------------------------------------------------------------
def _git_setup(repo: str, commits: list[tuple[dict[str, str], str]]) -> str:
    """Setup lines for a repo on `main` with these commits ({path: full new content}, message),
    dated one day apart from a fixed date so hashes never depend on the clock."""
    lines = [f"mkdir -p {repo} && cd {repo} && git init -q -b main",
             "git config user.name 'Setup Bot' && git config user.email setup@example.com"]
    for day, (changes, msg) in enumerate(commits, 1):
        lines += [_write(f"{repo}/{p}", c) for p, c in changes.items()]
        date = f"2024-03-{day:02d}T12:00:00+00:00"
        lines.append(f"git add -A && GIT_AUTHOR_DATE={date} GIT_COMMITTER_DATE={date} "
                     f"git commit -q -m {_q(msg)}")
    return "\n".join(lines) + "\ncd /work"


def git_init_commit(rng: random.Random) -> Parts:
    site = f"/work/{_word(rng)}-site"
    files = {"index.html": f"<h1>{_word(rng)}</h1>\n", "css/site.css": "body { margin: 0; }\n",
             f"docs/{_word(rng)}.md": f"# Notes {rng.randint(1, 99)}\n"}
    msg = f"Add {rng.choice(('initial', 'first'))} {_word(rng)} site (#{rng.randint(1, 500)})"
    who = rng.choice(NAMES)
    email = f"{who.lower()}@{_word(rng)}.example"
    prompt = (f"Turn {site} into a git repository whose branch `main` has exactly one commit. "
              f"The commit must contain every file in {site}, have the message `{msg}`, and the "
              f"author name `{who}` and author email `{email}`. Leave `main` checked out and "
              "the working tree clean.")
    setup = "\n".join(_write(f"{site}/{p}", c) for p, c in files.items())
    g = ["git", "-C", site]
    verify = "\n".join([
        f"[ -d {site}/.git ] || fail '{site} is not a git repository'",
        _expect_run([*g, "symbolic-ref", "--short", "HEAD"], "main\n"),
        _expect_run([*g, "rev-list", "--count", "main"], "1\n"),
        _expect_run([*g, "log", "-1", "--format=%s%n%an%n%ae", "main"], f"{msg}\n{who}\n{email}\n"),
        _expect_run([*g, "ls-tree", "-r", "--name-only", "main"], _lines(_csort(list(files)))),
        _expect_run([*g, "status", "--porcelain"], "")])
    solution = (f"cd {site} && git init -q -b main && git add -A && git -c user.name={_q(who)} "
                f"-c user.email={email} commit -q -m {_q(msg)}\n")
    return prompt, setup, verify, solution


def git_branch_commit(rng: random.Random) -> Parts:
    repo = f"/work/{_word(rng)}-service"
    major, minor, patch = rng.randint(0, 3), rng.randint(0, 20), rng.randint(0, 9)
    cfg = f"config/{_word(rng)}.ini"
    before = f"[app]\nname = {_word(rng)}\nversion = {major}.{minor}.{patch}\ndebug = false\n"
    after = before.replace(f"{major}.{minor}.{patch}", f"{major}.{minor}.{patch + 1}")
    commits = [({"README.md": "service\n", cfg: before}, "Initial import"),
               ({"src/main.sh": "echo run\n"}, "Add entry point"),
               ({"README.md": "service\nsee config/\n"}, "Document config")]
    branch = f"release/{major}.{minor}.{patch + 1}"
    msg = f"Bump version to {major}.{minor}.{patch + 1}"
    prompt = (f"In the git repository {repo}, create a branch `{branch}` starting at `main`. On "
              f"it, change the line `version = {major}.{minor}.{patch}` of `{cfg}` to "
              f"`version = {major}.{minor}.{patch + 1}` and commit only that change, as one "
              f"commit with the message `{msg}`. `main` must stay where it is.")
    setup = _git_setup(repo, commits)
    g = ["git", "-C", repo]
    verify = "\n".join([
        f"git -C {repo} rev-parse -q --verify refs/heads/{branch} >/dev/null "
        f"|| fail 'no branch {branch}'",
        _expect_run([*g, "log", "-1", "--format=%s", "main"], "Document config\n"),
        _expect_run([*g, "rev-list", "--count", "main"], "3\n"),
        _expect_run([*g, "rev-list", "--count", f"main..{branch}"], "1\n"),
        f'[ "$(git -C {repo} rev-parse {branch}^)" = "$(git -C {repo} rev-parse main)" ] '
        f"|| fail '{branch} does not start at main'",
        _expect_run([*g, "log", "-1", "--format=%s", branch], f"{msg}\n"),
        _expect_run([*g, "diff", "--name-only", "main", branch], f"{cfg}\n"),
        _expect_run([*g, "show", f"{branch}:{cfg}"], after)])
    solution = (f"cd {repo} && git checkout -q -b {branch} main && "
                f"sed -i 's/^version = {major}\\.{minor}\\.{patch}$/version = "
                f"{major}.{minor}.{patch + 1}/' {cfg} && git add {cfg} && "
                f"git commit -q -m {_q(msg)}\n")
    return prompt, setup, verify, solution


def git_find_commit(rng: random.Random) -> Parts:
    repo = f"/work/{_word(rng)}-lib"
    paths = [f"src/{w}.sh" for w in _names(rng, 3)] + [f"docs/{w}.md" for w in _names(rng, 2)]
    target = rng.choice(paths)
    verbs = ["Fix", "Refactor", "Tidy", "Speed up", "Document", "Test", "Harden", "Simplify"]
    content = {p: "" for p in paths}
    commits, touched = [], []
    for i in range(rng.randint(6, 9)):
        changed = rng.sample(paths, rng.randint(1, 2))
        if i == 0:
            changed = paths  # the first commit adds everything
        for p in changed:
            content[p] += f"change {i} {rng.randint(1, 999)}\n"
        msg = f"{rng.choice(verbs)} {rng.choice(WORDS)} handling (step {i + 1})"
        commits.append(({p: content[p] for p in changed}, msg))
        touched.append(target in changed)
    if sum(touched) < 2 or touched[-1]:  # last change of the target: neither first nor newest
        return git_find_commit(rng)
    last = max(i for i, t in enumerate(touched) if t)
    prompt = (f"In the git repository {repo}, find the most recent commit on `main` that "
              f"changed the file `{target}`. Write that commit's subject (the first line of its "
              "message), followed by a newline, to /work/answer.txt.")
    verify = _expect_file("/work/answer.txt", f"{commits[last][1]}\n")
    solution = f"git -C {repo} log -1 --format=%s main -- {target} > /work/answer.txt\n"
    return prompt, _git_setup(repo, commits), verify, solution


# -- processes --------------------------------------------------------------------------------
def processes_args_script(rng: random.Random) -> Parts:
    path = f"/work/bin/{_word(rng)}"
    kind = rng.choice(("count", "reverse", "sum"))
    words = [*rng.sample(WORDS, 3), "two words", "-n"]
    runs: list[list[str]] = [[]]
    for _ in range(3):
        if kind == "sum":
            runs.append([str(rng.randint(-99, 999)) for _ in range(rng.randint(1, 5))])
        else:
            runs.append(rng.sample(words, rng.randint(1, len(words))))
    what = {"count": "prints the number of arguments it was given (in decimal) on one line",
            "reverse": "prints its arguments in reverse order, one per line, each exactly as "
                       "given (an argument may contain spaces or start with `-`)",
            "sum": "prints the sum of its arguments (all integers, possibly negative) in decimal "
                   "on one line; with no arguments it prints 0"}[kind]
    prompt = (f"Write an executable bash script {path} that {what}. It must print nothing else "
              "and exit with status 0.")

    def output(args: list[str]) -> str:
        if kind == "count":
            return f"{len(args)}\n"
        if kind == "sum":
            return f"{sum(int(a) for a in args)}\n"
        return _lines(args[::-1])

    verify = "\n".join([f"[ -f {path} ] && [ -x {path} ] || fail '{path} is not executable'"] +
                       [_expect_run([path, *args], output(args)) for args in runs])
    body = {"count": 'echo "$#"\n',
            "reverse": 'for ((i = $#; i > 0; i--)); do printf \'%s\\n\' "${!i}"; done\n',
            "sum": 's=0\nfor a in "$@"; do s=$((s + a)); done\necho "$s"\n'}[kind]
    solution = _write(path, "#!/bin/bash\n" + body) + f"chmod +x {path}\n"
    return prompt, "mkdir -p /work/bin", verify, solution


def processes_exit_status(rng: random.Random) -> Parts:
    root = "/work/tools"
    want = rng.randint(3, 9)
    names = [f"{w}-{rng.randint(1, 9)}" for w in _names(rng, rng.randint(5, 8))]
    winner = rng.choice(names)
    setup, others = [], [s for s in range(0, 12) if s != want]
    for n in names:
        status = want if n == winner else rng.choice(others)
        a = rng.randint(2, 40)
        m = a * rng.randint(2, 9) - status  # exits with (a * k - m); the status is a sum away
        k = (m + status) // a
        body = (f"#!/bin/bash\necho \"{n}: checking {rng.choice(WORDS)}\"\n"
                f"echo 'progress {rng.randint(1, 99)}%' >&2\nexit $(( {a} * {k} - {m} ))\n")
        setup.append(_write(f"{root}/{n}", body) + f"chmod 755 {root}/{n}")
    prompt = (f"Exactly one of the executables in {root} exits with status {want} when run "
              "without arguments. Write its file name (without the directory), followed by a "
              "newline, to /work/answer.txt.")
    verify = _expect_file("/work/answer.txt", f"{winner}\n")
    solution = (f"for f in {root}/*; do rc=0; \"$f\" >/dev/null 2>&1 || rc=$?; "
                f"if [ $rc -eq {want} ]; then basename \"$f\"; fi; done > /work/answer.txt\n")
    return prompt, "\n".join(setup), verify, solution


TEMPLATES: dict[str, tuple[Callable[[random.Random], Parts], ...]] = {
    "text": (text_count, text_csv_unique, text_replace),
    "files": (files_large, files_by_extension, files_move),
    "permissions": (permissions_run, permissions_modes, permissions_world_writable),
    "archives": (archives_create, archives_extract),
    "git": (git_init_commit, git_branch_commit, git_find_commit),
    "processes": (processes_args_script, processes_exit_status),
}


def make_task(seed: int, i: int) -> Task:
    """Task `i` of `seed`: independent of every other index, so streams can be resumed."""
    order = list(FAMILIES)
    random.Random(f"{seed}:order:{i // 6}").shuffle(order)
    family = order[i % 6]
    rng = random.Random(f"{seed}:{i}")
    template = rng.choice(TEMPLATES[family])
    prompt, setup, verify, solution = template(rng)
    return Task(
        id=f"synth-{seed}-{i}-{family}", prompt=prompt,
        answer="set -eu\n" + solution.rstrip("\n") + "\n",
        meta={"setup": "set -eu\ncd /work\n" + setup.rstrip("\n") + "\n",
              "verify": "#!/bin/bash\n" + VERIFY_LIB + verify.rstrip("\n") + "\nexit 0\n",
              "family": family, "template": template.__name__, "timeout_s": TIMEOUT_S,
              "source": SOURCE, "seed": seed})


def task_stream(seed: int) -> Iterator[Task]:
    """Endless tasks for `seed`, always the same ones in the same order."""
    i = 0
    while True:
        yield make_task(seed, i)
        i += 1


def generate(seed: int, n: int | None = None) -> list[Task]:
    """The first `n` tasks of `task_stream(seed)` (n=None: 100)."""
    n = 100 if n is None else n
    if n < 0:
        raise UsageError(f"n must be >= 0, got {n}")
    return [make_task(seed, i) for i in range(n)]


__all__ = ["FAMILIES", "TEMPLATES", "generate", "make_task", "task_stream"]
