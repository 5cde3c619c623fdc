"""Localization instances from repositories' own histories, for choosing settings on more than the
23 SWE-bench dev issues: each first-parent commit that changes one or two non-test Python files
(only modifications, at most 120 changed lines) becomes an instance in SWE-bench's own fields,
its commit message (subject and body, without trailers or PR numbers) the problem statement,
its parent the base commit, its diff the patch.

    python evaluation/commit_instances.py MIRRORS_DIR OUT.jsonl [PER_REPO] [EXCLUDE.jsonl]

Commits that touch a file some instance of EXCLUDE (default: the SWE-bench Lite dev split in
../shared) changes are left out, so that split stays a holdout these instances never saw.
Deterministic: the newest PER_REPO (default 60) qualifying commits of each mirror's HEAD.
"""

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIRRORS = pathlib.Path(sys.argv[1])
OUT = pathlib.Path(sys.argv[2])
PER_REPO = int(sys.argv[3]) if len(sys.argv) > 3 else 60
EXCLUDE = pathlib.Path(sys.argv[4] if len(sys.argv) > 4 else ROOT / "../shared/data/swe-bench-lite-dev/dev.jsonl")

TEST = re.compile(r"(^|/)(tests?|testing)(/|$)|(^|/)test_[^/]*\.py$|_test\.py$|conftest\.py$")
# Commits a bot or a release makes say nothing of the code they touch.
CHORE = re.compile(r"^\s*(bump|\[pre-commit|pre-commit|update pre-commit|release|version|changelog|merge|revert)", re.I)
TRAILER = re.compile(r"^(Signed-off-by|Co-authored-by|Reviewed-by|Change-Id):.*$", re.M | re.I)


def git(repo, *args):
    return subprocess.run(["git", "--git-dir", str(repo), *args], capture_output=True, text=True, errors="replace").stdout


def changed(patch):
    out = []
    for line in patch.splitlines():
        if line.startswith("--- a/"):
            out.append(line[6:])
    return out


def main():
    excluded = {}
    if EXCLUDE.is_file():
        for l in EXCLUDE.read_text().splitlines():
            if l.strip():
                i = json.loads(l)
                excluded.setdefault(i["repo"], set()).update(changed(i["patch"]))
    lines = []
    for d in sorted(MIRRORS.iterdir()):
        repo = d / "repo" if (d / "repo").is_dir() else d
        if not (repo / "objects").is_dir():
            continue
        owner_name = d.name.replace("+", "/", 1).removesuffix(".git")
        found = 0
        for c in git(repo, "rev-list", "--first-parent", "--no-merges", "-n", "3000", "HEAD").split():
            if found >= PER_REPO:
                break
            parent = git(repo, "rev-parse", f"{c}^").strip()
            if not parent:
                continue
            status = [l.split("\t") for l in git(repo, "diff", "--name-status", parent, c, "--", "*.py").splitlines()]
            if not status or any(s[0] != "M" for s in status):
                continue
            paths = [s[1] for s in status]
            if len(paths) > 2 or any(TEST.search(p) for p in paths):
                continue
            if set(paths) & excluded.get(owner_name, set()):
                continue
            patch = git(repo, "diff", parent, c, "--", *paths)
            n = sum(1 for l in patch.splitlines() if l[:1] in "+-" and not l.startswith(("+++", "---")))
            if n == 0 or n > 120:
                continue
            msg = git(repo, "log", "-1", "--format=%B", c)
            msg = TRAILER.sub("", msg)
            msg = re.sub(r"\(#\d+\)|#\d+", "", msg).strip()
            if len(msg) < 40 or CHORE.match(msg):
                continue
            lines.append(json.dumps({
                "instance_id": f"{owner_name.replace('/', '__')}-{c[:10]}",
                "repo": owner_name,
                "base_commit": parent,
                "problem_statement": msg,
                "hints_text": "",
                "patch": patch,
            }))
            found += 1
        print(f"{owner_name}: {found} instances", file=sys.stderr)
    OUT.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
