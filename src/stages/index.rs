//! index: a BM25 index per repository (and one over all repositories when there are several),
//! stored as `bm25_terms`, `bm25_postings` and `bm25_docs`, and loaded back for querying.

use crate::artifact::{hash_json, Store};
use crate::bm25::Index as Bm25;
use crate::config::{IndexConfig, Plan};
use crate::error::Result;
use crate::pipeline::{Ctx, Stage};
use crate::schema::{ChunkRow, DocRow, PostingRow, TermRow};
use crate::text::analyze::Analyzer;
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Scope name of the index over every repository.
pub const ALL: &str = "*";

pub struct Index;

/// The text a chunk is indexed (and embedded) by: with `with_path`, its path, heading path and
/// text; else its text alone.
pub fn indexed_text(c: &ChunkRow, with_path: bool) -> String {
    if with_path {
        format!("{}\n{}\n{}", c.path, c.heading, c.text)
    } else {
        c.text.clone()
    }
}

/// The analyser the index was built with.
pub fn analyzer(cfg: &IndexConfig) -> Analyzer {
    Analyzer::new(cfg.stem, cfg.stopwords)
        .whole_identifiers(cfg.whole_identifiers)
        .split_digits(cfg.split_digits)
}

fn rows_for(scope: &str, ix: &Bm25) -> (Vec<TermRow>, Vec<PostingRow>, Vec<DocRow>) {
    let mut terms: Vec<(&str, &[(u32, u32)])> = ix.terms().collect();
    terms.sort_by_key(|(t, _)| *t);
    let mut t_rows = Vec::with_capacity(terms.len());
    let mut p_rows = Vec::new();
    for (t, list) in terms {
        t_rows.push(TermRow {
            scope: scope.to_string(),
            term: t.to_string(),
            df: list.len() as u32,
        });
        for &(d, tf) in list {
            p_rows.push(PostingRow {
                scope: scope.to_string(),
                term: t.to_string(),
                chunk_id: ix.docs[d as usize].clone(),
                tf,
            });
        }
    }
    let d_rows = ix
        .docs
        .iter()
        .zip(&ix.lengths)
        .map(|(id, &length)| DocRow {
            scope: scope.to_string(),
            chunk_id: id.clone(),
            length,
        })
        .collect();
    (t_rows, p_rows, d_rows)
}

/// Builds the index of one scope from its chunks.
pub fn build(chunks: &[ChunkRow], analyzer: &Analyzer, with_path: bool) -> Bm25 {
    let docs: Vec<(String, Vec<String>)> = chunks
        .par_iter()
        .map(|c| {
            (
                c.chunk_id.clone(),
                analyzer.terms(&indexed_text(c, with_path)),
            )
        })
        .collect();
    Bm25::build(docs)
}

impl Stage for Index {
    fn name(&self) -> &'static str {
        "index"
    }
    fn inputs(&self) -> &'static [&'static str] {
        &["chunk"]
    }
    fn config(&self, plan: &Plan) -> Value {
        json!({ "index": plan.index })
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let cfg = ctx.plan.index.clone();
        let an = analyzer(&cfg);
        let parts = ctx.store.files_of("chunks")?;
        // With several repositories, a scope over all of them too; its key covers every input.
        let all_key = (parts.len() > 1)
            .then(|| hash_json(&(&cfg, parts.iter().map(|p| &p.sha256).collect::<Vec<_>>())));
        let all_needed = match &all_key {
            Some(key) => !reuse_scope(ctx, ALL, key)?,
            None => false,
        };
        let bar = ctx.bar(parts.len() as u64, "scopes");
        let mut all_chunks = Vec::new();
        for part in &parts {
            let key = hash_json(&(&cfg, &part.sha256));
            let reused = reuse_scope(ctx, &part.part, &key)?;
            if !reused || all_needed {
                let chunks: Vec<ChunkRow> = ctx.store.read_rows(part)?;
                if !reused {
                    write_scope(ctx, &part.part, &key, &build(&chunks, &an, cfg.with_path))?;
                }
                if all_needed {
                    all_chunks.extend(chunks);
                }
            }
            bar.inc(1);
        }
        if let (true, Some(key)) = (all_needed, &all_key) {
            write_scope(ctx, ALL, key, &build(&all_chunks, &an, cfg.with_path))?;
        }
        bar.finish_and_clear();
        Ok(())
    }
}

const TABLES: [&str; 3] = ["bm25_terms", "bm25_postings", "bm25_docs"];

/// Reuses the three tables of `scope` if all were computed from `key`.
fn reuse_scope(ctx: &mut Ctx, scope: &str, key: &str) -> Result<bool> {
    let mut all = true;
    for t in TABLES {
        all &= ctx.writer.reuse(t, scope, key)?.is_some();
    }
    Ok(all)
}

/// Writes the three tables of one scope's index.
fn write_scope(ctx: &mut Ctx, scope: &str, key: &str, ix: &Bm25) -> Result<()> {
    let (t, p, d) = rows_for(scope, ix);
    ctx.writer.write(TABLES[0], scope, key, &t)?;
    ctx.writer.write(TABLES[1], scope, key, &p)?;
    ctx.writer.write(TABLES[2], scope, key, &d)?;
    Ok(())
}

/// Loads the BM25 index of every scope from the stored tables.
pub fn load(store: &Store) -> Result<HashMap<String, Bm25>> {
    let docs: Vec<DocRow> = store.read("bm25_docs")?;
    let postings: Vec<PostingRow> = store.read("bm25_postings")?;
    let mut d_by: HashMap<&str, Vec<(&str, u32)>> = HashMap::new();
    for d in &docs {
        d_by.entry(&d.scope)
            .or_default()
            .push((&d.chunk_id, d.length));
    }
    let mut p_by: HashMap<&str, Vec<(&str, &str, u32)>> = HashMap::new();
    for p in &postings {
        p_by.entry(&p.scope)
            .or_default()
            .push((&p.term, &p.chunk_id, p.tf));
    }
    let mut out = HashMap::new();
    for (scope, d) in d_by {
        let p = p_by.remove(scope).unwrap_or_default();
        out.insert(scope.to_string(), Bm25::from_rows(d, p));
    }
    Ok(out)
}

/// Document frequencies of one scope, for idf without loading its postings.
pub struct Idf {
    docs: usize,
    df: HashMap<String, u32>,
}

impl Idf {
    /// Lucene idf of `term` in this scope (0 for unknown terms).
    pub fn idf(&self, term: &str) -> f64 {
        crate::bm25::lucene_idf(self.docs, self.df.get(term).copied().unwrap_or(0) as usize)
    }
}

/// The document frequencies of every scope, from `bm25_terms` and `bm25_docs`.
pub fn load_idf(store: &Store) -> Result<HashMap<String, Idf>> {
    let mut out: HashMap<String, Idf> = HashMap::new();
    for d in store.read::<DocRow>("bm25_docs")? {
        out.entry(d.scope)
            .or_insert_with(|| Idf {
                docs: 0,
                df: HashMap::new(),
            })
            .docs += 1;
    }
    for t in store.read::<TermRow>("bm25_terms")? {
        if let Some(s) = out.get_mut(&t.scope) {
            s.df.insert(t.term, t.df);
        }
    }
    Ok(out)
}

/// The scope a question searches: its repository, or all (`*`) — which is the only repository's
/// own index when the pipeline has one.
pub fn scope_of<'a, T>(indexes: &'a HashMap<String, T>, repo: &str) -> Option<&'a T> {
    indexes.get(repo).or_else(|| {
        if repo == ALL && indexes.len() == 1 {
            indexes.values().next()
        } else {
            None
        }
    })
}
