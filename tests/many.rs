//! Many repositories: 150 small real git repositories (more than one merge round), a list file,
//! and a question over all of them. The stored all-repository scope equals an index built in
//! memory over every chunk: the same document frequencies, documents, and `*` retrieval.

mod common;

use common::{commit_files, pipeline, ri_batch};
use ri_batch::artifact::Store;
use ri_batch::bm25::{Index, Params, Searcher};
use ri_batch::config::Plan;
use ri_batch::schema::{ChunkRow, DocRow, RetrievalRow, TermRow};
use std::collections::HashMap;
use std::fmt::Write as _;

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
    for f in store.files_of("chunks").unwrap() {
        chunks.extend(store.read_rows::<ChunkRow>(&f).unwrap());
    }
    let whole = Index::build(
        chunks
            .iter()
            .map(|c| (c.chunk_id.clone(), an.terms(&c.indexed_text(true)))),
    );

    let terms: Vec<TermRow> = store.read("bm25_terms").unwrap();
    let all: HashMap<&str, u32> = terms
        .iter()
        .filter(|t| t.scope == "*")
        .map(|t| (t.term.as_str(), t.df))
        .collect();
    assert_eq!(all.len(), whole.terms().count());
    for (t, (docs, _)) in whole.terms() {
        assert_eq!(all.get(t).copied(), Some(docs.len() as u32), "df of {t}");
    }
    let docs: Vec<DocRow> = store.read("bm25_docs").unwrap();
    let all_docs: Vec<&str> = docs
        .iter()
        .filter(|d| d.scope == "*")
        .map(|d| d.chunk_id.as_str())
        .collect();
    assert_eq!(
        all_docs,
        whole.docs.iter().map(|d| d.as_str()).collect::<Vec<_>>()
    );

    let got: Vec<RetrievalRow> = store.read("retrievals").unwrap();
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
