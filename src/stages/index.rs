//! index: a BM25 index per repository, and one over all repositories when there are several.
//! Each scope is stored for opening, not rebuilding: `bm25_index` (CSR postings, Arrow IPC,
//! memory-mapped by readers) beside `bm25_terms` and `bm25_docs` (Parquet, for SQL). Repositories
//! are built a few at a time and written as they finish; the all-repository scope is a streaming
//! merge of the stored per-repository indexes, so no step holds every repository's postings.

use crate::artifact::{hash_json, FileEntry, FileFormat};
use crate::bm25::stored::{self, Stored};
use crate::bm25::{Index as Bm25, Postings};
use crate::config::Plan;
use crate::error::{Error, Result};
use crate::pipeline::{Ctx, Stage};
use crate::readers::{open_stored, ALL, BM25_INDEX};
use crate::schema::{ChunkRow, DocRow, Row, TermRow};
use arrow::array::{ArrayRef, AsArray, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::Schema;
use rayon::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;

pub struct Index;

/// The tables of one scope.
const TABLES: [&str; 3] = [TermRow::TABLE, BM25_INDEX, DocRow::TABLE];

/// Inputs merged at once into the all-repository scope (see `merge_all`).
const MERGE_FAN_IN: usize = 64;

/// Chunks analysed together before their terms are indexed.
const ANALYSE_SLICE: usize = 512;

/// The chunk columns the index reads.
const CHUNK_COLUMNS: [&str; 4] = ["chunk_id", "path", "heading", "text"];

#[derive(serde::Deserialize)]
struct IndexedChunk {
    chunk_id: String,
    path: String,
    heading: String,
    text: String,
}

impl IndexedChunk {
    fn text(&self, with_path: bool) -> String {
        crate::schema::indexed_text(&self.path, &self.heading, &self.text, with_path)
    }
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
    fn version(&self) -> u32 {
        // 2: postings stored as memory-mapped CSR (`bm25_index`) instead of `bm25_postings` rows.
        2
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let cfg = ctx.plan.index.clone();
        let an = cfg.analyzer();
        let parts = ctx.store.files_of(ChunkRow::TABLE)?;
        let bar = ctx.bar(parts.len() as u64, "repos");
        let mut todo = Vec::new();
        for part in &parts {
            let key = hash_json(&(&cfg, &part.sha256));
            if reuse_scope(ctx, &part.part, &key)? {
                bar.inc(1);
            } else {
                todo.push((part, key));
            }
        }
        // A few repositories at a time: memory follows the largest repository, not their number.
        let width = rayon::current_num_threads().max(1);
        for group in todo.chunks(width) {
            let built: Vec<Result<Bm25>> = group
                .par_iter()
                .map(|(part, _)| {
                    let chunks: Vec<IndexedChunk> =
                        ctx.store.read_rows_of(part, Some(&CHUNK_COLUMNS))?;
                    // Analysed a slice of chunks at a time, in parallel: a document's terms live
                    // until it is indexed, so memory follows the slice, not the repository.
                    Ok(Bm25::build(chunks.chunks(ANALYSE_SLICE).flat_map(
                        |slice| {
                            slice
                                .par_iter()
                                .map(|c| (c.chunk_id.clone(), an.terms(&c.text(cfg.with_path))))
                                .collect::<Vec<_>>()
                        },
                    )))
                })
                .collect();
            for ((part, key), ix) in group.iter().zip(built) {
                write_scope(ctx, &part.part, key, &ix?)?;
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        // The scope over all repositories is the merge's work, not a shard's.
        if parts.len() > 1 && ctx.plan.shard.is_none() {
            if let Some(mb) = crate::pipeline::peak_memory_mb() {
                ctx.stat("peak_rss_mb_before_merge", mb);
            }
            crate::pipeline::release_free_memory();

            // The scope over all repositories; its key covers every input.
            let key = hash_json(&(&cfg, parts.iter().map(|p| &p.sha256).collect::<Vec<_>>()));
            if !reuse_scope(ctx, ALL, &key)? {
                let scopes: Vec<String> = parts.iter().map(|p| p.part.clone()).collect();
                merge_all(ctx, &scopes, &key)?;
            }
        }
        Ok(())
    }
}

/// Reuses the tables of `scope` if all were computed from `key`.
fn reuse_scope(ctx: &mut Ctx, scope: &str, key: &str) -> Result<bool> {
    let mut all = true;
    for t in TABLES {
        all &= ctx.writer.reuse(t, scope, key)?.is_some();
    }
    Ok(all)
}

fn term_schema() -> Arc<Schema> {
    Arc::new(Schema::new(TermRow::fields()))
}

/// `bm25_terms` rows of a stored-index batch: (scope, term, df).
fn term_batch(scope: &str, batch: &RecordBatch) -> Result<RecordBatch> {
    let terms = batch.column(0).clone();
    let docs = batch.column(1).as_list::<i32>();
    let df: UInt32Array = docs
        .offsets()
        .windows(2)
        .map(|w| (w[1] - w[0]) as u32)
        .collect();
    let scopes = StringArray::from(vec![scope; terms.len()]);
    let columns: Vec<ArrayRef> = vec![Arc::new(scopes), terms, Arc::new(df)];
    RecordBatch::try_new(term_schema(), columns).map_err(|e| Error::Invalid(e.to_string()))
}

/// Writes the tables of one scope's index.
fn write_scope(ctx: &mut Ctx, scope: &str, key: &str, ix: &Bm25) -> Result<()> {
    let batches = stored::encode(ix);
    let mut terms = ctx
        .writer
        .part(TABLES[0], scope, key, term_schema(), FileFormat::Parquet)?;
    for b in &batches {
        terms.write(&term_batch(scope, b)?)?;
    }
    ctx.writer.finish(terms)?;
    let mut index = ctx.writer.part(
        TABLES[1],
        scope,
        key,
        stored::schema(),
        FileFormat::ArrowIpc,
    )?;
    for b in &batches {
        index.write(b)?;
    }
    ctx.writer.finish(index)?;
    let docs: Vec<DocRow> = ix
        .docs
        .iter()
        .zip(&ix.lengths)
        .map(|(id, &length)| DocRow {
            scope: scope.to_string(),
            chunk_id: id.clone(),
            length,
        })
        .collect();
    ctx.writer.write(TABLES[2], scope, key, &docs)?;
    Ok(())
}

/// The file of `table`/`part` this run has written or reused.
fn this_run(ctx: &Ctx, table: &str, part: &str) -> Result<FileEntry> {
    ctx.writer.entry(table, part).cloned().ok_or_else(|| {
        Error::stage(
            "index",
            format!("the `{table}` file of `{part}` is missing"),
        )
    })
}

/// The all-repository scope: a streaming merge of the stored per-repository indexes in
/// repository order, so its documents are numbered as if built over all chunks at once.
fn merge_all(ctx: &mut Ctx, scopes: &[String], key: &str) -> Result<()> {
    // Each repository's documents are read once: their lengths open its index, and the rows go
    // on, renamed to the `*` scope, into that scope's `bm25_docs`.
    let mut docs = ctx.writer.part(
        TABLES[2],
        ALL,
        key,
        Arc::new(Schema::new(DocRow::fields())),
        FileFormat::Parquet,
    )?;
    let mut opened: Vec<Stored> = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let mut rows: Vec<DocRow> = ctx
            .store
            .read_rows_of(&this_run(ctx, TABLES[2], scope)?, None)?;
        let lengths = rows.iter().map(|d| d.length).collect();
        opened.push(open_mapped(
            ctx,
            &this_run(ctx, TABLES[1], scope)?,
            lengths,
        )?);
        for r in &mut rows {
            r.scope = ALL.to_string();
        }
        docs.write(&crate::schema::to_batch(&rows)?)?;
    }
    ctx.writer.finish(docs)?;
    // A merge maps pages ahead of where it reads in every input (the kernel maps cached pages
    // around each fault), so it takes at most `MERGE_FAN_IN` inputs at once; more are merged in
    // rounds through scratch files.
    let mut round = 0;
    let mut scratch = Vec::new();
    while opened.len() > MERGE_FAN_IN {
        let mut next = Vec::new();
        for (g, group) in opened.chunks(MERGE_FAN_IN).enumerate() {
            let (path, mut entry) = ctx.writer.scratch(&format!("merge-{round}-{g}.arrow"))?;
            let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
            let mut w = arrow::ipc::writer::FileWriter::try_new(
                std::io::BufWriter::new(file),
                &stored::schema(),
            )
            .map_err(|e| Error::artifact(&path, e))?;
            let refs: Vec<&Stored> = group.iter().collect();
            stored::merge(&refs, |b| w.write(&b))
                .and_then(|_| w.finish())
                .map_err(|e| Error::artifact(&path, e))?;
            drop(w);
            scratch.push(path.clone());
            entry.bytes = std::fs::metadata(&path)
                .map_err(|e| Error::io(&path, e))?
                .len();
            let lengths = group
                .iter()
                .flat_map(|s| s.lengths().iter().copied())
                .collect();
            next.push(open_mapped(ctx, &entry, lengths)?);
        }
        opened = next;
        round += 1;
    }
    let inputs: Vec<&Stored> = opened.iter().collect();
    let mut index = ctx
        .writer
        .part(TABLES[1], ALL, key, stored::schema(), FileFormat::ArrowIpc)?;
    let mut terms = ctx
        .writer
        .part(TABLES[0], ALL, key, term_schema(), FileFormat::Parquet)?;
    stored::merge(&inputs, |b| -> Result<()> {
        terms.write(&term_batch(ALL, &b)?)?;
        index.write(&b)
    })?;
    drop(inputs);
    drop(opened);
    for p in scratch {
        std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
    }
    ctx.writer.finish(terms)?;
    ctx.writer.finish(index)?;
    Ok(())
}

/// Opens a stored index file for merging: mapped, with the pages it has read dropped as it goes.
fn open_mapped(ctx: &Ctx, file: &FileEntry, lengths: Vec<u32>) -> Result<Stored> {
    let mut st = open_stored(ctx.store, file, lengths)?;
    // SAFETY: `open_stored` decodes the batches in place over a read-only file mapping, which
    // they keep alive.
    unsafe { st.set_mapped() };
    Ok(st)
}
