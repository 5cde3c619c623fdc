//! SWE-bench instances as questions: `dataset import swebench` reads JSONL, a JSON array and
//! Parquet alike; each good instance becomes a question at its base commit with its patch's files
//! as gold documents and its hunks' changed lines as line-anchored evidence; every bad instance
//! (unknown repository, missing commit, a patch that does not apply) is recorded with its id and
//! the rest goes on, through `[import] format = "swebench"` too.

mod common;

use arrow::array::{RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use common::{commit_files, pipeline, ri_batch};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

const PARSER: &str = "\"\"\"Parsing of configuration values.\"\"\"\n\n\ndef parse_duration(text):\n    \"\"\"Parse a duration such as 2h or 30m into seconds.\"\"\"\n    unit = text[-1]\n    value = int(text[:-1])\n    if unit == \"h\":\n        return value * 3600\n    return value * 60\n\n\ndef parse_size(text):\n    \"\"\"Parse a size such as 10k into bytes.\"\"\"\n    return int(text[:-1]) * 1024\n";

/// A mirror `mirrors/acme+tool` with a base commit and a fix; returns (base, fix patch).
fn mirror(root: &Path) -> (String, String) {
    let repo = root.join("mirrors/acme+tool");
    commit_files(
        &repo,
        &[
            ("tool/parse.py", PARSER),
            (
                "tool/cli.py",
                "import sys\n\n\ndef main():\n    print(sys.argv)\n",
            ),
            ("README.md", "# tool\n"),
        ],
        "base",
    );
    let base = git_out(&repo, &["rev-parse", "HEAD"]).trim().to_string();
    let fixed = PARSER.replace(
        "    return value * 60\n",
        "    if unit == \"s\":\n        return value\n    return value * 60\n",
    );
    commit_files(&repo, &[("tool/parse.py", &fixed)], "fix seconds");
    let patch = git_out(&repo, &["diff", "HEAD~1", "HEAD"]);
    (base, patch)
}

fn instance(id: &str, repo: &str, base: &str, patch: &str) -> serde_json::Value {
    serde_json::json!({
        "instance_id": id, "repo": repo, "base_commit": base,
        "problem_statement": "parse_duration ignores seconds: 30s is read as 30 minutes",
        "hints_text": "look at the unit check", "patch": patch,
        "test_patch": "diff --git a/tests/t.py b/tests/t.py\n", "version": "1.0",
    })
}

fn instances(base: &str, patch: &str) -> Vec<serde_json::Value> {
    vec![
        instance("acme__tool-1", "acme/tool", base, patch),
        instance("other__missing-2", "other/missing", base, patch),
        instance(
            "acme__tool-3",
            "acme/tool",
            "0123456789abcdef0123456789abcdef01234567",
            patch,
        ),
        instance(
            "acme__tool-4",
            "acme/tool",
            base,
            &patch.replace("return value * 60", "return value * 61"),
        ),
    ]
}

fn parquet(path: &Path, rows: &[serde_json::Value]) {
    let cols = [
        "instance_id",
        "repo",
        "base_commit",
        "problem_statement",
        "hints_text",
        "patch",
    ];
    let schema = Arc::new(Schema::new(
        cols.iter()
            .map(|c| Field::new(*c, DataType::Utf8, false))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<arrow::array::ArrayRef> = cols
        .iter()
        .map(|c| {
            Arc::new(StringArray::from(
                rows.iter()
                    .map(|r| r[*c].as_str().unwrap().to_string())
                    .collect::<Vec<_>>(),
            )) as arrow::array::ArrayRef
        })
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays).unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn instances_become_questions_at_their_commits_and_bad_ones_are_recorded() {
    let t = tempfile::tempdir().unwrap();
    let (base, patch) = mirror(t.path());
    let rows = instances(&base, &patch);
    let jsonl: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(t.path().join("i.jsonl"), &jsonl).unwrap();
    std::fs::write(
        t.path().join("i.json"),
        serde_json::to_string(&rows).unwrap(),
    )
    .unwrap();
    parquet(&t.path().join("i.parquet"), &rows);

    let mut outputs = Vec::new();
    for src in ["i.jsonl", "i.json", "i.parquet"] {
        let out = t.path().join(format!("imp-{src}"));
        let r = ri_batch(&[
            "dataset",
            "import",
            "swebench",
            t.path().join(src).to_str().unwrap(),
            "--repos",
            t.path().join("mirrors").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let err = String::from_utf8_lossy(&r.stderr);
        for id in ["other__missing-2", "acme__tool-3", "acme__tool-4"] {
            assert!(err.contains(&format!("rejected {id}")), "{src}: {err}");
        }
        assert!(err.contains("unknown repository `other/missing`"), "{err}");
        assert!(err.contains("not in the mirror"), "{err}");
        assert!(err.contains("tool/parse.py:10: the patch expects"), "{err}");
        outputs.push(std::fs::read_to_string(out.join("questions.jsonl")).unwrap());
    }
    assert_eq!(outputs[0], outputs[1], "JSON array and JSONL differ");
    assert_eq!(outputs[0], outputs[2], "Parquet and JSONL differ");
    let q: serde_json::Value = serde_json::from_str(outputs[0].lines().next().unwrap()).unwrap();
    assert_eq!(outputs[0].lines().count(), 1);
    assert_eq!(q["id"], "acme__tool-1");
    assert_eq!(q["repo"], "tool");
    assert_eq!(q["rev"], base.as_str());
    assert_eq!(q["gold"][0]["path"], "tool/parse.py");
    // The hunk inserts before `return value * 60` (line 10): the insertion follows line 9.
    let ev = &q["evidence"][0];
    assert_eq!(ev["path"], "tool/parse.py");
    assert_eq!(
        (ev["start_line"].as_u64(), ev["end_line"].as_u64()),
        (Some(9), Some(9))
    );
    assert_eq!(ev["quote"], "        return value * 3600");
    // Hints stay out unless asked for: they can give the fix away.
    assert!(!q["question"].as_str().unwrap().contains("unit check"));

    // The same through a pipeline's [import]: the good instance is evaluated, the bad ones are
    // counted (their ids and reasons in rejected.tsv), and the run succeeds: the dataset, not
    // the run, is short of them.
    let p = pipeline(
        t.path(),
        "[pipeline]\nname = \"s\"\noutput_dir = \"out\"\n\n[import]\nformat = \"swebench\"\nsource = \"i.parquet\"\nrepos = \"mirrors\"\nsplit = \"dev\"\n\n[scan]\ninclude = [\"**/*.py\"]\n\n[[variants]]\nname = \"files\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 2000\nfiles = \"fused\"\nfile_weight = 2.0\n",
    );
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    let out = t.path().join("out");
    let errors = ri_batch(&[
        "sql",
        out.to_str().unwrap(),
        "SELECT * FROM errors",
        "--format",
        "csv",
    ]);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&run.stderr),
        String::from_utf8_lossy(&errors.stdout)
    );
    let sql = |q: &str| {
        let r = ri_batch(&["sql", out.to_str().unwrap(), q, "--format", "csv"]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        String::from_utf8(r.stdout).unwrap()
    };
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("questions/manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["stats"]["instances_rejected"], 3, "{manifest}");
    let rejected = std::fs::read_to_string(out.join("import/rejected.tsv")).unwrap();
    for id in ["other__missing-2", "acme__tool-3", "acme__tool-4"] {
        assert!(rejected.contains(id), "{rejected}");
    }
    let eval = sql("SELECT question_id, acc1, packed_recall FROM evaluation");
    assert_eq!(
        eval.trim(),
        "question_id,acc1,packed_recall\nacme__tool-1,1.0,1.0",
        "{eval}"
    );
    let scope = sql("SELECT scope, rev FROM revisions");
    assert!(
        scope.contains(&format!("tool@{},{base}", &base[..12])),
        "{scope}"
    );
}
