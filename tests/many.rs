//! Many repositories: 150 small real git repositories (more than one merge round), a list file,
//! and a question over all of them. The stored all-repository scope equals an index built in
//! memory over every chunk: the same document frequencies, documents, and `*` retrieval. And a
//! repository's scope spilled to many segments and merged equals the scope built whole.

mod common;

use common::{commit_files, pipeline, ri_batch};
use ri_batch::artifact::schema::{ChunkRow, DocRow, RetrievalRow, TermRow};
use ri_batch::artifact::Store;
use ri_batch::config::Plan;
use ri_batch::retrieval::bm25::{Index, Params, Searcher};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Command;

const REPOS: usize = 150;

#[test]
fn the_all_repository_scope_equals_an_index_built_over_every_chunk() {
    let t = tempfile::tempdir().unwrap();
    let words = [
        "parse", "format", "duration", "token", "stream", "buffer", "config", "retry", "cache",
        "socket", "glob", "semver",
    ];
    let mut tsv = String::from("name\tgit\n");
    for i in 0..REPOS {
        let dir = t.path().join(format!("r/{i:03}"));
        let a = words[i % words.len()];
        let b = words[(i * 7 + 3) % words.len()];
        let readme = format!(
            "# crate {i}\n\nIt can {a} a {b}. The {a} step runs {} times.\n",
            i % 5
        );
        let code = format!("pub fn {a}_{b}(x: u32) -> u32 {{\n    x + {i}\n}}\n");
        commit_files(&dir, &[("README.md", &readme), ("src/lib.rs", &code)], "c");
        let _ = writeln!(tsv, "c{i:03}\tr/{i:03}");
    }
    std::fs::write(t.path().join("repos.tsv"), tsv).unwrap();
    std::fs::write(
        t.path().join("q.jsonl"),
        "{\"id\": \"all\", \"repo\": \"*\", \"split\": \"dev\", \"answerable\": false, \"question\": \"how do I parse a duration with retry\", \"evidence\": []}\n",
    )
    .unwrap();
    let p = pipeline(
        t.path(),
        "repos = \"repos.tsv\"\n[pipeline]\nname = \"many\"\noutput_dir = \"out\"\nquestions = \"q.jsonl\"\n\
         [retrieve]\ntop_k = 50\n[[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\nbudget = 300\n",
    );
    let run = ri_batch(&["run", p.to_str().unwrap(), "--quiet"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let plan = Plan::load(&p).unwrap();
    let store = Store::new(&plan.output_dir);

    // In memory: every chunk, in repository order, analysed as the index stage does.
    let an = plan.index.analyzer();
    let mut chunks: Vec<ChunkRow> = Vec::new();
    for f in store
        .files_of(ri_batch::artifact::schema::Table::Chunks)
        .unwrap()
    {
        chunks.extend(store.read_rows::<ChunkRow>(&f).unwrap());
    }
    let whole = Index::build(
        chunks
            .iter()
            .map(|c| (c.chunk_id.clone(), an.terms(&c.indexed_text(true)))),
    );

    let terms: Vec<TermRow> = store.read().unwrap();
    let all: HashMap<&str, u32> = terms
        .iter()
        .filter(|t| t.scope == "*")
        .map(|t| (t.term.as_str(), t.df))
        .collect();
    assert_eq!(all.len(), whole.terms().count());
    for (t, (docs, _)) in whole.terms() {
        assert_eq!(all.get(t).copied(), Some(docs.len() as u32), "df of {t}");
    }
    let docs: Vec<DocRow> = store.read().unwrap();
    let all_docs: Vec<&str> = docs
        .iter()
        .filter(|d| d.scope == "*")
        .map(|d| d.chunk_id.as_str())
        .collect();
    assert_eq!(
        all_docs,
        whole.docs.iter().map(|d| d.as_str()).collect::<Vec<_>>()
    );

    let got: Vec<RetrievalRow> = store.read().unwrap();
    let q = an.terms("how do I parse a duration with retry");
    let want = Searcher::new(&whole, Params::default()).search(&q, 50);
    assert!(want.len() > 10);
    assert_eq!(got.len(), want.len());
    for (r, (d, s)) in got.iter().zip(&want) {
        assert_eq!(r.chunk_id, whole.docs[*d as usize]);
        assert_eq!(r.score, *s);
    }
    // No scratch file of the merge rounds is left.
    let leftovers: Vec<_> = std::fs::read_dir(plan.output_dir.join("index"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty());
}

/// The index stage spills a scope to segments on scratch files past a memory budget and merges
/// them. On the bundled repositories, with a budget so small that every repository is cut into
/// many segments, the index tables are those of scopes built whole, byte for byte.
#[test]
fn scopes_spilled_to_segments_equal_scopes_built_whole() {
    let t = tempfile::tempdir().unwrap();
    let mut outs = Vec::new();
    for (name, budget) in [("whole", None), ("split", Some("20000"))] {
        let dir = t.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let plan = common::bundled_plan(&dir, "");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ri-batch"));
        cmd.args(["run", dir.join("pipeline.toml").to_str().unwrap()])
            .args(["--quiet", "--stages", "scan,chunk,index"]);
        if let Some(b) = budget {
            cmd.env("RI_BATCH_SPILL_BYTES", b);
        }
        let run = cmd.output().unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        outs.push(plan.output_dir);
    }
    let hashes: Vec<_> = outs.iter().map(|o| common::stage_hashes(o)).collect();
    assert_eq!(hashes[0]["chunk"], hashes[1]["chunk"]);
    assert_eq!(
        hashes[0]["index"], hashes[1]["index"],
        "spilled scopes differ"
    );

    let stats = |o: &std::path::Path| Store::new(o).manifest("index").unwrap().unwrap().stats;
    assert!(!stats(&outs[0]).contains_key("spilled_scopes"));
    let split = stats(&outs[1]);
    let repos = Store::new(&outs[1])
        .files_of(ri_batch::artifact::schema::Table::Chunks)
        .unwrap()
        .len() as u64;
    assert_eq!(split["spilled_scopes"].as_u64(), Some(repos));
    let segments = split["spilled_segments"].as_u64().unwrap();
    assert!(
        segments > 5 * repos,
        "{segments} segments over {repos} repositories"
    );
    let leftovers = std::fs::read_dir(outs[1].join("index"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .count();
    assert_eq!(leftovers, 0, "scratch segments left behind");

    // A budget that is not a number is an error that names the variable.
    let dir = t.path().join("whole");
    let bad = Command::new(env!("CARGO_BIN_EXE_ri-batch"))
        .args([
            "run",
            dir.join("pipeline.toml").to_str().unwrap(),
            "--quiet",
        ])
        .args(["--stages", "index", "--force"])
        .env("RI_BATCH_SPILL_BYTES", "lots")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("RI_BATCH_SPILL_BYTES"));
}
