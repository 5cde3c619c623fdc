//! Repository lists: a `glob` over a mirrors directory and a `repos = "…tsv"` list file, on real
//! git repositories and plain directories built in a temp dir; names derived safely and made
//! unique; list errors name the file and line; a run over the list completes.

mod common;

use common::{commit_files, pipeline, ri_batch};
use ri_batch::config::{Plan, RepoSource};

fn repos_of(plan: &Plan) -> Vec<(String, &'static str)> {
    plan.repos
        .iter()
        .map(|r| {
            let kind = match r.source {
                RepoSource::Git { .. } => "git",
                RepoSource::Dir { .. } => "dir",
            };
            (r.name.clone(), kind)
        })
        .collect()
}

#[test]
fn a_glob_names_repositories_safely_and_uniquely() {
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("mirrors");
    commit_files(&m.join("serde.git"), &[("lib.rs", "pub fn a() {}\n")], "a");
    commit_files(&m.join("my repo+x"), &[("README.md", "# x\n")], "b");
    std::fs::create_dir_all(m.join("serde")).unwrap();
    std::fs::write(m.join("serde/notes.md"), "plain directory\n").unwrap();
    std::fs::write(m.join("not-a-dir.txt"), "x").unwrap();
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"g\"\n[[repos]]\nname = \"serde\"\ndir = \"mirrors/serde\"\n[[repos]]\nglob = \"mirrors/*\"\n",
    );
    let plan = Plan::load(&p).unwrap();
    assert_eq!(
        repos_of(&plan),
        [
            ("serde".to_string(), "dir"),
            ("my_repo_x".to_string(), "git"),
            // `mirrors/serde` again (a plain directory) and `serde.git`, both named `serde`.
            ("serde-2".to_string(), "dir"),
            ("serde-3".to_string(), "git"),
        ]
    );
    let none = pipeline(
        t.path(),
        "[pipeline]\nname = \"g\"\n[[repos]]\nglob = \"nowhere/*\"\n",
    );
    let e = Plan::load(&none).unwrap_err().to_string();
    assert!(
        e.contains("pipeline.toml:4") && e.contains("matches no directory"),
        "{e}"
    );
}

#[test]
fn a_list_file_runs_and_its_errors_name_the_line() {
    let t = tempfile::tempdir().unwrap();
    commit_files(
        &t.path().join("src/alpha"),
        &[("README.md", "# Alpha\n\nAlpha parses dates.\n")],
        "a",
    );
    commit_files(
        &t.path().join("src/beta"),
        &[("README.md", "# Beta\n\nBeta formats sizes.\n")],
        "b",
    );
    std::fs::create_dir_all(t.path().join("src/gamma")).unwrap();
    std::fs::write(t.path().join("src/gamma/notes.md"), "# Gamma\n\nGamma.\n").unwrap();
    std::fs::create_dir_all(t.path().join("lists")).unwrap();
    std::fs::write(
        t.path().join("lists/repos.tsv"),
        "# three repositories\nname\tgit\tdir\trev\nalpha\t../src/alpha\t\tHEAD\n\t../src/beta\n\t\t../src/gamma\n",
    )
    .unwrap();
    std::fs::write(
        t.path().join("q.jsonl"),
        "{\"id\": \"q1\", \"repo\": \"beta\", \"split\": \"dev\", \"answerable\": true, \"question\": \"What does beta format?\", \"evidence\": [{\"path\": \"README.md\", \"quote\": \"Beta formats sizes.\"}]}\n",
    )
    .unwrap();
    let p = pipeline(
        t.path(),
        "repos = \"lists/repos.tsv\"\n[pipeline]\nname = \"l\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n[[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\nbudget = 200\n",
    );
    let plan = Plan::load(&p).unwrap();
    assert_eq!(
        repos_of(&plan),
        [
            ("alpha".to_string(), "git"),
            ("beta".to_string(), "git"),
            ("gamma".to_string(), "dir")
        ]
    );
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let got = ri_batch(&[
        "sql",
        t.path().join("out").to_str().unwrap(),
        "SELECT scope, count(*) AS n FROM bm25_docs GROUP BY scope ORDER BY scope",
        "--format",
        "csv",
    ]);
    let csv = String::from_utf8_lossy(&got.stdout);
    assert_eq!(
        csv.trim(),
        "scope,n\n*,3\nalpha,1\nbeta,1\ngamma,1",
        "{csv}"
    );

    for (bad, line, what) in [
        ("name\tgit\nx\ta\tb\n", 2, "3 cells but 2 columns"),
        (
            "name\tgit\tdir\nx\ta\tb\n",
            2,
            "exactly one of `git` or `dir`",
        ),
        ("name\tpath\n", 1, "unknown column `path`"),
        (
            "name\tdir\nx\t../src/gamma\nx\t../src/alpha\n",
            3,
            "listed twice",
        ),
        ("name\tdir\nbad/name\t../src/gamma\n", 2, "use only letters"),
    ] {
        std::fs::write(t.path().join("lists/repos.tsv"), bad).unwrap();
        let e = Plan::load(&p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("repos.tsv:{line}: ")) && e.contains(what),
            "{bad:?}: {e}"
        );
    }
}
