//! Repositories read at many revisions: a repository with several revisions keeps each (path,
//! blob) once, and each revision scores, packs and evaluates exactly as a run of that revision
//! alone; a missing blob is the file's problem, never the revision's; revisions can come from the
//! question file.

mod common;

use common::{commit_files, git, pipeline, ri_batch};
use ri_batch::artifact::outcomes::Reason;
use ri_batch::artifact::schema::{
    ChunkRow, EvaluationRow, ExtractRow, FileRetrievalRow, FileRow, PackRow, RetrievalRow, Row,
    SkippedRow, TreeRow,
};
use ri_batch::artifact::Store;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

/// The commit id `HEAD` names in `dir`.
fn head(dir: &Path) -> String {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// A module of `n` functions whose names and words depend on `seed`, so files differ in words.
fn module(seed: usize, n: usize) -> String {
    let words = [
        "parse", "render", "token", "buffer", "socket", "retry", "cache", "index", "merge",
        "split", "quote", "escape", "stream", "window", "filter",
    ];
    let mut s = format!(
        "\"\"\"Module {seed}: helpers for {}.\"\"\"\n\n",
        words[seed % 15]
    );
    for i in 0..n {
        let a = words[(seed * 7 + i) % 15];
        let b = words[(seed + i * 3) % 15];
        s.push_str(&format!(
            "def {a}_{b}_{i}(value):\n    \"\"\"{a} the {b} of value {i}.\"\"\"\n    return value.{a}({b}={i})\n\n\n"
        ));
    }
    s
}

/// A repository of 12 files over 5 commits, each commit changing one or two files; returns the
/// commit ids, oldest first.
fn history(dir: &Path) -> Vec<String> {
    let mut files: Vec<(String, String)> = (0..12)
        .map(|i| (format!("pkg/mod{i}.py"), module(i, 6 + i % 4)))
        .collect();
    files.push(("README.md".into(), "# lib\n\nA small library.\n".into()));
    // A module of several chunks whose first a later step changes: its later chunks stay those
    // of the first commit.
    files.push(("pkg/big.py".into(), module(3, 30)));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    commit_files(dir, &refs, "first");
    let mut commits = vec![head(dir)];
    for step in 1..5 {
        let i = step * 2;
        // Inserted after the module's docstring: every later line moves, so one path's versions
        // hold other text at the same lines.
        let at = files[i].1.find("\n\n").map_or(0, |p| p + 2);
        files[i].1.insert_str(
            at,
            &format!(
                "def added_in_step_{step}(x):\n    \"\"\"Step {step} adds a stream window.\"\"\"\n    return x\n\n\n"
            ),
        );
        if step == 2 {
            // Its first function's docstring, in place: that chunk is new, the later ones stay.
            files[13].1 = files[13]
                .1
                .replacen("of value 0.", "of the altered stream window.", 1);
        }
        let mut change = vec![(files[i].0.as_str(), files[i].1.as_str())];
        if step == 2 {
            change.push((files[13].0.as_str(), files[13].1.as_str()));
        }
        if step == 3 {
            // A file added at a later revision.
            change.push(("pkg/extra.py", "def extra():\n    return 'merge quote'\n"));
        }
        commit_files(dir, &change, &format!("step {step}"));
        commits.push(head(dir));
    }
    commits
}

/// Questions: two per revision, with line-anchored evidence in the file the step changed.
fn questions(commits: &[String], rev_field: bool, repo_of: impl Fn(usize) -> String) -> String {
    let mut out = String::new();
    for (r, c) in commits.iter().enumerate() {
        let i = (r.max(1)) * 2;
        for (k, q) in [
            format!("where is the stream window added in step {r}"),
            format!("how to escape the quote filter {r}"),
        ]
        .iter()
        .enumerate()
        {
            let mut v = serde_json::json!({
                "id": format!("q{r}-{k}"), "repo": repo_of(r), "split": "dev",
                "answerable": true, "question": q,
                "evidence": [{"path": format!("pkg/mod{i}.py"), "quote": format!("def ")}],
                "gold": [{"path": format!("pkg/mod{i}.py")}],
            });
            if rev_field {
                v["rev"] = serde_json::json!(c);
            }
            out.push_str(&v.to_string());
            out.push('\n');
        }
        if r >= 2 {
            // Evidence in the changed chunk, packed before the module's older chunks: each is
            // rendered from the version it was scanned at.
            let mut v = serde_json::json!({
                "id": format!("q{r}-2"), "repo": repo_of(r), "split": "dev",
                "answerable": true, "question": "which cache function has the altered stream window",
                "evidence": [{"path": "pkg/big.py", "quote": "altered stream window"}],
                "gold": [{"path": "pkg/big.py"}],
            });
            if rev_field {
                v["rev"] = serde_json::json!(c);
            }
            out.push_str(&v.to_string());
            out.push('\n');
        }
    }
    out
}

const VARIANTS: &str = "[chunk]\nmax_tokens = 120\n\n[retrieve]\ntop_k = 8\n\n[[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 300\n\n[[variants]]\nname = \"compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 300\n\n[[variants]]\nname = \"files\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 300\nfiles = \"fused\"\n";

fn run(p: &Path) {
    let out = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Reads a whole table of a run.
fn table<R: Row>(out: &Path) -> Vec<R> {
    Store::new(out).read().unwrap()
}

#[test]
fn each_revision_scores_as_a_run_of_it_alone_and_blobs_are_kept_once() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("lib");
    let commits = history(&repo);

    // Shared: one repository, its revisions taken from the questions.
    let shared = t.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(
        shared.join("q.jsonl"),
        questions(&commits, true, |_| "lib".into()),
    )
    .unwrap();
    let p = pipeline(
        &shared,
        &format!(
            "[pipeline]\nname = \"shared\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\n[[repos]]\nname = \"lib\"\ngit = \"{}\"\n\n{VARIANTS}",
            repo.display()
        ),
    );
    run(&p);

    // Alone: one repository entry per revision, read whole.
    let alone = t.path().join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::write(
        alone.join("q.jsonl"),
        questions(&commits, false, |r| format!("lib_r{r}")),
    )
    .unwrap();
    let mut toml =
        "[pipeline]\nname = \"alone\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\n"
            .to_string();
    for (r, c) in commits.iter().enumerate() {
        toml.push_str(&format!(
            "[[repos]]\nname = \"lib_r{r}\"\ngit = \"{}\"\nrev = \"{c}\"\n\n",
            repo.display()
        ));
    }
    toml.push_str(VARIANTS);
    run(&pipeline(&alone, &toml));

    let (a, b) = (shared.join("out"), alone.join("out"));
    // Each (path, blob) once: 14 files at the first commit, one new version per later step and
    // one of pkg/big.py, and pkg/extra.py.
    let files: Vec<FileRow> = table(&a);
    let alone_files: Vec<FileRow> = table(&b);
    assert_eq!(files.len(), 14 + 4 + 1 + 1, "{}", files.len());
    assert_eq!(alone_files.len(), 14 * 5 + 2);
    let trees: Vec<TreeRow> = table(&a);
    assert_eq!(
        trees.len(),
        alone_files.len(),
        "every revision lists its files"
    );
    let chunks: Vec<ChunkRow> = table(&a);
    let alone_chunks: Vec<ChunkRow> = table(&b);
    assert!(
        chunks.len() * 3 < alone_chunks.len(),
        "{} chunks shared, {} alone",
        chunks.len(),
        alone_chunks.len()
    );
    let mut ids: Vec<&str> = chunks.iter().map(|c| c.chunk_id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), chunks.len(), "a chunk is stored once");

    // The same rankings, to the bit, chunk for chunk (ids differ: the repository's name is in
    // them); the same packs, file rankings and metrics.
    let span = |cs: &[ChunkRow]| -> HashMap<String, (String, u32, u32, String)> {
        cs.iter()
            .map(|c| {
                (
                    c.chunk_id.clone(),
                    (c.path.clone(), c.start_line, c.end_line, c.text.clone()),
                )
            })
            .collect()
    };
    let (sa, sb) = (span(&chunks), span(&alone_chunks));
    let ranked = |rows: Vec<RetrievalRow>, s: &HashMap<String, (String, u32, u32, String)>| {
        rows.into_iter()
            .map(|r| {
                (
                    (r.variant, r.question_id, r.rank),
                    (s[&r.chunk_id].clone(), r.score.to_bits()),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    let ra = ranked(table(&a), &sa);
    let rb = ranked(table(&b), &sb);
    assert!(ra.len() > 50, "{}", ra.len());
    assert_eq!(ra, rb, "rankings differ from each revision alone");
    let packed = |rows: Vec<PackRow>| {
        rows.into_iter()
            .map(|p| {
                (
                    (p.variant, p.question_id, p.order),
                    (p.path, p.start_line, p.end_line, p.text, p.tokens),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(packed(table(&a)), packed(table(&b)));
    let files_ranked = |rows: Vec<FileRetrievalRow>| {
        rows.into_iter()
            .map(|f| {
                (
                    (f.variant, f.question_id, f.rank),
                    (f.path, f.score.to_bits()),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    let fa = files_ranked(table(&a));
    assert!(!fa.is_empty());
    assert_eq!(fa, files_ranked(table(&b)));
    let metrics = |rows: Vec<EvaluationRow>| {
        rows.into_iter()
            .map(|e| {
                (
                    (e.variant, e.question_id),
                    format!(
                        "{:?} {:?} {} {:?} {:?} {:?} {:?}",
                        e.pool_recall,
                        e.packed_recall,
                        e.tokens_used,
                        e.mrr10,
                        e.recall10,
                        e.acc1,
                        e.outcome
                    ),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(metrics(table(&a)), metrics(table(&b)));
    // The same extracts: the shared run reads its revisions' packs and source lines as one batch
    // (several versions of a path, spans at the same lines), each revision alone as its own; the
    // evidence accepted and rendered is each revision's own.
    let extracted = |rows: Vec<ExtractRow>| {
        rows.into_iter()
            .map(|x| {
                let kept = (x.accepted_ids, x.outcome, x.reason, x.rendered);
                ((x.variant, x.question_id), (kept, x.support.to_bits()))
            })
            .collect::<BTreeMap<_, _>>()
    };
    let xa = extracted(table(&a));
    let rendered = xa.values().filter(|(k, _)| !k.3.is_empty()).count();
    assert!(
        rendered * 2 > xa.len(),
        "{rendered} of {} rendered",
        xa.len()
    );
    assert_eq!(xa, extracted(table(&b)));
    // No piece was refused for its source: each is rendered from the version it was hashed at,
    // though a revision's packs hold chunks of one path scanned at several commits.
    let unread: Vec<_> = xa
        .iter()
        .filter(|(_, ((_, _, reason, _), _))| {
            matches!(reason, Reason::SourceChanged | Reason::SourceUnreadable)
        })
        .map(|(k, _)| k)
        .collect();
    assert!(unread.is_empty(), "{unread:?}");
    let mixed = table::<PackRow>(&a)
        .iter()
        .filter(|p| p.path == "pkg/big.py")
        .map(|p| p.commit.clone())
        .collect::<std::collections::BTreeSet<_>>();
    assert!(mixed.len() > 1, "pkg/big.py packed from {mixed:?}");
    // `serve` answers a revision's question as the batch extracted it, from the same versions.
    let served = ri_batch::serve::Run::open(&a).unwrap();
    let questions: Vec<ri_batch::artifact::schema::QuestionRow> = table(&a);
    let mut asked = 0;
    for q in questions.iter().filter(|q| q.question_id.ends_with("-2")) {
        let answer = served
            .answer(&q.question, Some(q.scope.as_str()), None, Some("rank"))
            .unwrap();
        let ((_, _, reason, rendered), _) = &xa[&("rank".to_string(), q.question_id.clone())];
        assert_eq!(*reason, Reason::Ok, "{}", q.question_id);
        assert_eq!(&answer.rendered, rendered, "{}", q.question_id);
        asked += 1;
    }
    assert_eq!(asked, 3);
    // Outputs do not grow with the revisions: the shared run's scan and chunk stages are
    // smaller than the run of each revision alone.
    let bytes = |out: &Path, stage: &str| -> u64 {
        Store::new(out)
            .manifest(stage)
            .unwrap()
            .unwrap()
            .files
            .iter()
            .map(|f| f.bytes)
            .sum()
    };
    for stage in ["scan", "chunk", "index"] {
        assert!(
            bytes(&a, stage) * 2 < bytes(&b, stage),
            "{stage}: {} shared against {} alone",
            bytes(&a, stage),
            bytes(&b, stage)
        );
    }
    // A re-run with nothing changed does nothing.
    let again = ri_batch(&["run", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("0 stages ran"), "{err}");
}

#[test]
fn adding_a_revision_gives_the_tables_of_a_fresh_run() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("lib");
    let commits = history(&repo);
    let revs = |n: usize| {
        commits[..n]
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let body = |n: usize| {
        format!(
            "[pipeline]\nname = \"r\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\n[[repos]]\nname = \"lib\"\ngit = \"{}\"\nrevs = [{}]\n\n{VARIANTS}",
            repo.display(),
            revs(n)
        )
    };
    let qs = |n: usize| questions(&commits[..n], true, |_| "lib".into());
    let nightly = t.path().join("nightly");
    let fresh = t.path().join("fresh");
    for d in [&nightly, &fresh] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(nightly.join("q.jsonl"), qs(3)).unwrap();
    run(&pipeline(&nightly, &body(3)));
    std::fs::write(nightly.join("q.jsonl"), qs(5)).unwrap();
    run(&pipeline(&nightly, &body(5)));
    std::fs::write(fresh.join("q.jsonl"), qs(5)).unwrap();
    run(&pipeline(&fresh, &body(5)));
    assert_eq!(
        common::stage_hashes(&nightly.join("out")),
        common::stage_hashes(&fresh.join("out")),
        "a run that grew by two revisions differs from a fresh one"
    );
}

#[test]
fn a_missing_blob_is_a_skipped_file_and_an_excluded_one_is_never_looked_up() {
    let t = tempfile::tempdir().unwrap();
    let repo = t.path().join("r");
    commit_files(
        &repo,
        &[
            ("keep.py", "def keep():\n    return 1\n"),
            ("gone.py", "def gone():\n    return 2\n"),
            ("data/big.dat", "not python at all\n"),
        ],
        "one",
    );
    commit_files(&repo, &[("keep.py", "def keep():\n    return 3\n")], "two");
    // Remove the loose objects of an included and an excluded file, as a partial clone or an
    // LFS-less mirror lacks them.
    for path in ["gone.py", "data/big.dat"] {
        let out = Command::new("git")
            .args(["rev-parse", &format!("HEAD:{path}")])
            .current_dir(&repo)
            .output()
            .unwrap();
        let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let obj = repo.join(".git/objects").join(&id[..2]).join(&id[2..]);
        std::fs::remove_file(&obj).unwrap();
    }
    git(&repo, &["log", "--oneline"]);
    let p = pipeline(
        t.path(),
        &format!(
            "[pipeline]\nname = \"m\"\noutput_dir = \"out\"\n\n[[repos]]\nname = \"r\"\ngit = \"{}\"\nrevs = [\"HEAD~1\", \"HEAD\"]\n\n[scan]\ninclude = [\"**/*.py\"]\n",
            repo.display()
        ),
    );
    let out = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let o = t.path().join("out");
    let files: Vec<FileRow> = table(&o);
    let mut kept: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    kept.sort();
    assert_eq!(kept, ["keep.py", "keep.py"], "two versions of keep.py");
    let skipped: Vec<SkippedRow> = table(&o);
    let reason = |p: &str| {
        skipped
            .iter()
            .filter(|s| s.path == p)
            .map(|s| s.reason.clone())
            .collect::<Vec<_>>()
    };
    let gone = reason("gone.py");
    assert_eq!(gone.len(), 1, "{skipped:?}");
    assert!(gone[0].starts_with("missing_object"), "{gone:?}");
    assert_eq!(reason("data/big.dat"), ["excluded"]);
    let errors: Vec<ri_batch::artifact::schema::ErrorRow> = table(&o);
    assert!(errors.is_empty(), "{errors:?}");
    let trees: Vec<TreeRow> = table(&o);
    let mut scopes: Vec<&str> = trees.iter().map(|t| t.scope.as_str()).collect();
    scopes.dedup();
    assert_eq!(scopes.len(), 2, "both revisions were read: {scopes:?}");
}

#[test]
fn revisions_are_checked_before_any_work() {
    let t = tempfile::tempdir().unwrap();
    let base = "[pipeline]\nname = \"x\"\n\n[[repos]]\nname = \"r\"\ngit = \"r\"\n";
    let cases = [
        ("revs = []\n", "`revs` is empty"),
        ("rev = \"a\"\nrevs = [\"b\"]\n", "not both"),
        (
            "revs = [\"v1/x\", \"v1_x\"]\n",
            "would both be scope `r@v1_x`",
        ),
    ];
    for (extra, want) in cases {
        let p = pipeline(t.path(), &format!("{base}{extra}"));
        let e = ri_batch::config::Plan::load(&p).unwrap_err().to_string();
        assert!(e.contains(want), "{extra}: {e}");
        assert!(e.contains("pipeline.toml:"), "{e}");
    }
}
