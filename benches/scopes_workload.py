"""A SWE-bench-shaped workload with many revisions, built from Rust sources already on the machine
(the cargo registry that building ri-batch fills): REPOS repositories, each a base tree of FILES
real source files and COMMITS one-file commits (a comment line inserted after a function's
signature). Each commit is an instance in SWE-bench's fields: its parent the base commit, its diff
the patch, a problem statement naming the function and the file. Writes OUT/mirrors/synth+bigR/repo
(bare), OUT/instances.jsonl (one revision per instance) and OUT/instances-head.jsonl (the same
instances, each at its repository's last commit: the same questions over one revision per
repository). Deterministic for a given registry.

    python3 benches/scopes_workload.py OUT [REPOS] [COMMITS] [FILES]
"""
import json
import pathlib
import random
import re
import difflib
import shutil
import subprocess
import sys

out = pathlib.Path(sys.argv[1])
R = int(sys.argv[2]) if len(sys.argv) > 2 else 3
N = int(sys.argv[3]) if len(sys.argv) > 3 else 100
FILES = int(sys.argv[4]) if len(sys.argv) > 4 else 1500
registry = pathlib.Path.home() / ".cargo/registry/src"
src = sorted(p for p in registry.glob("*/*/**/*.rs") if 500 < p.stat().st_size < 60000)
if len(src) < R * FILES:
    sys.exit(f"scopes_workload: {len(src)} Rust files under {registry}, {R * FILES} wanted")
rng = random.Random(7)
rng.shuffle(src)
instances, head = [], []
for r in range(R):
    work = out / f"work{r}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    def git(*a):
        return subprocess.run(["git", "-C", str(work), *a], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    git("config", "user.email", "bench@example.com")
    git("config", "user.name", "bench")
    for i, p in enumerate(src[r * FILES:(r + 1) * FILES]):
        dst = work / f"{p.parent.parent.name}_{i}" / p.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(p.read_bytes())
    git("add", "-A")
    git("commit", "-qm", "base")
    tracked = git("ls-files").split()
    mine = []
    while len(mine) < N:
        f = rng.choice(tracked)
        lines = (work / f).read_text(errors="replace").splitlines(keepends=True)
        fns = [i for i, l in enumerate(lines) if re.match(r"\s*(pub )?fn \w+", l)]
        if not fns:
            continue
        i = rng.choice(fns)
        fn = re.search(r"fn (\w+)", lines[i]).group(1)
        lines.insert(i + 1, f"    // {fn}: guard against an empty input before use ({len(mine)})\n")
        (work / f).write_text("".join(lines))
        base = git("rev-parse", "HEAD").strip()
        git("commit", "-qam", f"fix {fn}")
        mine.append({
            "_path": f,
            "_mark": f"({len(mine)})\n",
            "instance_id": f"synth__big{r}-{len(mine)}",
            "repo": f"synth/big{r}",
            "base_commit": base,
            "problem_statement": f"{fn} fails on an empty input in {pathlib.Path(f).stem}",
            "hints_text": "",
            "patch": git("diff", base, "HEAD"),
        })
    last = git("rev-parse", "HEAD").strip()
    for i in mine:
        f, mark = i.pop("_path"), i.pop("_mark")
        before = git("show", f"{last}:{f}").splitlines(keepends=True)
        after = [l.replace("before use", "before it is used") if l.endswith(mark) else l for l in before]
        diff = "".join(difflib.unified_diff(before, after, f"a/{f}", f"b/{f}"))
        head.append(dict(i, base_commit=last, patch=f"diff --git a/{f} b/{f}\n{diff}"))
    instances += mine
    mirror = out / "mirrors" / f"synth+big{r}"
    shutil.rmtree(mirror, ignore_errors=True)
    mirror.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(mirror / "repo")], check=True)
    shutil.rmtree(work)
(out / "instances.jsonl").write_text("".join(json.dumps(i) + "\n" for i in instances))
(out / "instances-head.jsonl").write_text("".join(json.dumps(i) + "\n" for i in head))
print(f"scopes_workload: {len(instances)} instances over {R} repositories in {out}", file=sys.stderr)
