//! index: a BM25 index per repository, and one over all repositories when there are several;
//! when a variant ranks whole files, the same over files (path and text as one document).
//! Each scope is stored for opening, not rebuilding: `bm25_index` (CSR postings, Arrow IPC,
//! memory-mapped by readers) beside `bm25_terms` and `bm25_docs` (Parquet, for SQL). Repositories
//! are built one at a time from a slice of chunks at a time, spilled to scratch segments past a
//! memory budget, and written as they finish; a spilled scope and the all-repository scope are
//! streaming merges of stored indexes, so no step holds a large repository's or every
//! repository's postings at once.

use crate::artifact::readers::{open_stored, IndexKind};
use crate::artifact::schema::{ChunkRow, DocRow, FileDocRow, FileRow, Row, Scope, Table, TermRow};
use crate::artifact::StageId;
use crate::artifact::{hash_json, FileEntry, FileFormat, StageWriter, Store};
use crate::config::{IndexConfig, Plan};
use crate::error::{Error, Result};
use crate::retrieval::bm25::stored::{self, Stored};
use crate::retrieval::bm25::{Index as Bm25, Postings};
use crate::stages::{Ctx, Stage};
use crate::text::analyze::Analyzer;
use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::error::ArrowError;
use arrow::ipc::writer::FileWriter;
use rayon::prelude::*;
use serde_json::{json, Value};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub struct Index;

/// Inputs merged at once into the all-repository scope (see `merge_all`).
const MERGE_FAN_IN: usize = 64;

/// Chunks analysed together before their terms are indexed.
const ANALYSE_SLICE: usize = 512;

/// Whole files analysed together (a file is many chunks' text).
const FILE_SLICE: usize = 32;

/// Estimated in-memory size of a scope being built past which it is spilled to a segment. Measured
/// at 457 repositories (index stage alone, with the workers' freed memory returned before each
/// spilled merge): 16 MiB peaked at 70 MB, 4 MiB at 59–60 MB, in the same wall time.
const SPILL_BYTES: usize = 4 << 20;

/// Bytes per posting of an index being built (document and frequency, with growth slack).
const BYTES_PER_POSTING: usize = 10;

/// Bytes per distinct term of an index being built (its string, map entry and list headers).
const BYTES_PER_TERM: usize = 160;

/// The chunk columns the index reads.
const CHUNK_COLUMNS: [&str; 4] = ["chunk_id", "path", "heading", "text"];

/// The file columns the whole-file index reads.
const FILE_COLUMNS: [&str; 2] = ["path", "text"];

#[derive(serde::Deserialize)]
struct IndexedChunk {
    chunk_id: String,
    path: String,
    heading: String,
    text: String,
}

#[derive(serde::Deserialize)]
struct IndexedFile {
    path: String,
    text: String,
}

/// What one kind of index is built from: the table, the columns, the slice, and each row's id
/// and analysed text.
struct Source {
    kind: IndexKind,
    table: Table,
}

impl Source {
    const CHUNKS: Source = Source {
        kind: IndexKind::Chunks,
        table: ChunkRow::TABLE,
    };
    const FILES: Source = Source {
        kind: IndexKind::Files,
        table: FileRow::TABLE,
    };
}

impl Stage for Index {
    fn id(&self) -> StageId {
        StageId::Index
    }
    fn inputs(&self) -> &'static [StageId] {
        &[StageId::Scan, StageId::Chunk]
    }
    fn config(&self, plan: &Plan) -> Value {
        let mut v = json!({ "index": plan.index });
        if plan.file_index() {
            v["files"] = json!(true);
        }
        if !all_repos(plan) {
            v["all_repos"] = json!(false);
        }
        v
    }
    fn version(&self) -> u32 {
        // 2: postings stored as memory-mapped CSR (`bm25_index`) instead of `bm25_postings` rows.
        2
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let all = all_repos(ctx.plan);
        build_kind(ctx, &Source::CHUNKS, all)?;
        if ctx.plan.file_index() {
            build_kind(ctx, &Source::FILES, all)?;
        }
        Ok(())
    }
}

/// Whether the index over all repositories (`*`) is built: `[index] all_repos`, or when unset,
/// unless a repository is read at several revisions (their `*` would mix the revisions) and no
/// question asks `*`.
fn all_repos(plan: &Plan) -> bool {
    plan.index.all_repos.unwrap_or_else(|| {
        !plan.repos.iter().any(|r| r.many())
            || plan.questions.as_ref().is_some_and(|q| {
                crate::evaluation::dataset::load_questions(q)
                    .map(|qs| qs.iter().any(|q| q.scope.is_all()))
                    .unwrap_or(true)
            })
    })
}

/// Builds every scope of one kind of index: per repository partition of its source table, then
/// the scope over all repositories.
fn build_kind(ctx: &mut Ctx, src: &Source, all: bool) -> Result<()> {
    let cfg = ctx.plan.index.clone();
    let an = cfg.analyzer();
    let parts = ctx.store.files_of(src.table)?;
    let bar = ctx.bar(parts.len() as u64, "repos");
    let salt = (src.kind == IndexKind::Files).then_some("files");
    let mut todo = Vec::new();
    for part in &parts {
        let key = hash_json(&(&cfg, &part.sha256, salt, stored::FORMAT));
        if reuse_scope(ctx, src.kind, &part.part, &key)? {
            bar.inc(1);
        } else {
            todo.push((part, key));
        }
    }
    // One repository at a time (its documents analysed in parallel), spilled to segments past
    // `SPILL_BYTES`: memory follows that budget, not the largest repository or their number.
    let (mut spilled, mut segments_total) = (0usize, 0usize);
    for (part, key) in todo {
        let scope = ctx.store.part_scope(part)?;
        match build_scope(ctx.store, &mut ctx.writer, part, src, &cfg, &an)? {
            Built::Whole(ix) => {
                write_stored(ctx, src.kind, &part.part, &key, StoredFrom::Memory(&ix))?;
                write_docs(ctx, src.kind, &scope, &key, &ix.docs, &ix.lengths)?;
            }
            Built::Spilled {
                docs,
                lengths,
                mut segments,
            } => {
                spilled += 1;
                segments_total += segments.len();
                // What the analysis freed on the worker threads goes back before the merge.
                crate::memory::release_free();
                let opened = segments
                    .iter_mut()
                    .map(|sg| open_mapped(ctx, &sg.entry, std::mem::take(&mut sg.lengths)))
                    .collect::<Result<Vec<_>>>()?;
                write_stored(ctx, src.kind, &part.part, &key, StoredFrom::Merge(&opened))?;
                drop(opened);
                for sg in segments {
                    std::fs::remove_file(&sg.path).map_err(|e| Error::io(&sg.path, e))?;
                }
                write_docs(ctx, src.kind, &scope, &key, &docs, &lengths)?;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let prefix = if src.kind == IndexKind::Files {
        "file_"
    } else {
        ""
    };
    if spilled > 0 {
        ctx.stat(&format!("{prefix}spilled_scopes"), spilled);
        ctx.stat(&format!("{prefix}spilled_segments"), segments_total);
    }
    // The scope over all repositories is the merge's work, not a shard's; each chunker has its
    // own (`*`, `*~name`), over its partitions.
    let chunkers: Vec<Option<&str>> = match src.kind {
        IndexKind::Chunks => ctx.plan.chunker_names(),
        IndexKind::Files => vec![None],
    };
    for chunker in chunkers {
        let mine: Vec<&FileEntry> = parts
            .iter()
            .filter(|p| {
                p.part
                    .parse::<Scope>()
                    .is_ok_and(|s| s.chunker() == chunker)
            })
            .collect();
        if !(all && mine.len() > 1 && ctx.plan.shard.is_none()) {
            continue;
        }
        if let Some(mb) = crate::memory::peak_mb() {
            ctx.stat(&format!("{prefix}peak_rss_mb_before_merge"), mb);
        }
        crate::memory::release_free();

        // The scope over all repositories; its key covers every input.
        let sums: Vec<&String> = mine.iter().map(|p| &p.sha256).collect();
        let key = hash_json(&(&cfg, sums, salt, stored::FORMAT));
        let scope = Scope::all().with_chunker(chunker);
        if !reuse_scope(ctx, src.kind, scope.as_str(), &key)? {
            let scopes: Vec<String> = mine.iter().map(|p| p.part.clone()).collect();
            merge_all(ctx, src.kind, scope.as_str(), &scopes, &key)?;
        }
    }
    Ok(())
}

/// A scope's index as built: whole in memory, or in segments spilled to scratch files, whose
/// streaming merge is the same stored index, byte for byte.
enum Built {
    Whole(Bm25),
    Spilled {
        docs: Vec<String>,
        lengths: Vec<u32>,
        segments: Vec<Segment>,
    },
}

/// One spilled segment: its scratch file (an entry `Store::map_ipc` takes), its documents' lengths.
struct Segment {
    path: PathBuf,
    entry: FileEntry,
    lengths: Vec<u32>,
}

/// Builds one repository's index from its chunks, read, analysed and indexed a slice at a time,
/// so a chunk's text and terms live only until it is indexed. Once the index so far is
/// estimated past [`SPILL_BYTES`], it is written to a scratch segment and a new one begun.
fn build_scope(
    store: &Store,
    writer: &mut StageWriter,
    part: &FileEntry,
    src: &Source,
    cfg: &IndexConfig,
    an: &Analyzer,
) -> Result<Built> {
    let budget = spill_bytes()?;
    let mut ix = Bm25::default();
    let mut postings = 0;
    let mut scratch = Vec::new();
    let (mut docs, mut lengths, mut segments) = (Vec::new(), Vec::new(), Vec::new());
    let kind = src.kind;
    let mut spill = |ix: Bm25, segments: &mut Vec<Segment>| -> Result<()> {
        let prefix = if kind == IndexKind::Files {
            "file-"
        } else {
            ""
        };
        let name = format!("{prefix}segment-{}-{}.arrow", part.part, segments.len());
        let (path, mut entry) = writer.scratch(&name)?;
        entry.bytes = write_scratch(&path, |w| stored::encode_each(&ix, |b| w.write(&b)))?;
        segments.push(Segment {
            path,
            entry,
            lengths: ix.lengths.clone(),
        });
        docs.extend(ix.docs);
        lengths.extend(ix.lengths);
        Ok(())
    };
    let mut add = |analysed: Vec<(String, Vec<String>)>,
                   ix: &mut Bm25,
                   segments: &mut Vec<Segment>|
     -> Result<()> {
        for (id, terms) in analysed {
            postings += ix.add(id, &terms, &mut scratch);
            if postings * BYTES_PER_POSTING + ix.terms_len() * BYTES_PER_TERM > budget {
                postings = 0;
                spill(std::mem::take(ix), segments)?;
            }
        }
        Ok(())
    };
    match kind {
        IndexKind::Chunks => store.for_each_rows(
            part,
            Some(&CHUNK_COLUMNS),
            ANALYSE_SLICE,
            |chunks: Vec<IndexedChunk>| {
                let analysed: Vec<(String, Vec<String>)> = chunks
                    .into_par_iter()
                    .map(|c| {
                        let text = crate::artifact::schema::indexed_text(
                            &c.path,
                            &c.heading,
                            &c.text,
                            cfg.with_path,
                        );
                        (c.chunk_id, an.terms(&text))
                    })
                    .collect();
                add(analysed, &mut ix, &mut segments)
            },
        )?,
        IndexKind::Files => store.for_each_rows(
            part,
            Some(&FILE_COLUMNS),
            FILE_SLICE,
            |files: Vec<IndexedFile>| {
                let analysed: Vec<(String, Vec<String>)> = files
                    .into_par_iter()
                    .map(|f| {
                        // A file is its path and its text, as whole-file baselines index it.
                        let terms = an.terms(&format!("{}\n{}", f.path, f.text));
                        (f.path, terms)
                    })
                    .collect();
                add(analysed, &mut ix, &mut segments)
            },
        )?,
    }
    if segments.is_empty() {
        return Ok(Built::Whole(ix));
    }
    if !ix.is_empty() {
        spill(ix, &mut segments)?;
    }
    Ok(Built::Spilled {
        docs,
        lengths,
        segments,
    })
}

/// The spill budget: [`SPILL_BYTES`], or the environment's `RI_BATCH_SPILL_BYTES` (tests set a
/// small one to split every scope into many segments).
fn spill_bytes() -> Result<usize> {
    match std::env::var("RI_BATCH_SPILL_BYTES") {
        Err(_) => Ok(SPILL_BYTES),
        Ok(v) => v.parse().map_err(|_| {
            Error::Invalid(format!(
                "RI_BATCH_SPILL_BYTES: `{v}` is not a number of bytes"
            ))
        }),
    }
}

/// Writes a stored index to the scratch file `path` through `fill`; returns the file's size.
fn write_scratch(
    path: &Path,
    fill: impl FnOnce(&mut FileWriter<BufWriter<std::fs::File>>) -> std::result::Result<(), ArrowError>,
) -> Result<u64> {
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = FileWriter::try_new(BufWriter::new(file), &stored::schema())
        .map_err(|e| Error::artifact(path, e))?;
    fill(&mut w)
        .and_then(|_| w.finish())
        .map_err(|e| Error::artifact(path, e))?;
    drop(w);
    Ok(std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len())
}

/// Reuses the tables of `scope` if all were computed from `key`.
fn reuse_scope(ctx: &mut Ctx, kind: IndexKind, scope: &str, key: &str) -> Result<bool> {
    let mut all = true;
    for t in kind.tables() {
        all &= ctx.writer.reuse(t, scope, key)?.is_some();
    }
    Ok(all)
}

/// `bm25_terms` rows of a stored-index batch: (scope, term, df).
fn term_batch(scope: &str, batch: &RecordBatch) -> Result<RecordBatch> {
    let terms = batch.column(0).clone();
    let df = stored::dfs(batch).map_err(Error::Invalid)?;
    let scopes = StringArray::from(vec![scope; terms.len()]);
    let columns: Vec<ArrayRef> = vec![Arc::new(scopes), terms, Arc::new(df)];
    RecordBatch::try_new(TermRow::schema(), columns).map_err(|e| Error::Invalid(e.to_string()))
}

/// Where a scope's stored tables come from.
enum StoredFrom<'a> {
    /// An index built in memory, encoded a batch at a time.
    Memory(&'a Bm25),
    /// The streaming merge of stored indexes, whose documents are numbered one after another.
    Merge(&'a [Stored]),
}

/// Writes the `bm25_terms` and `bm25_index` files of `scope`. Each batch of the stored form goes
/// to both files as it is made, so no second copy of the index is held.
fn write_stored(
    ctx: &mut Ctx,
    kind: IndexKind,
    scope: &str,
    key: &str,
    from: StoredFrom,
) -> Result<()> {
    let [index_table, terms_table, _] = kind.tables();
    let mut terms = ctx.writer.part(
        terms_table,
        scope,
        key,
        TermRow::schema(),
        FileFormat::Parquet,
    )?;
    let mut index = ctx.writer.part(
        index_table,
        scope,
        key,
        stored::schema(),
        FileFormat::ArrowIpc,
    )?;
    let mut emit = |b: RecordBatch| -> Result<()> {
        terms.write(&term_batch(scope, &b)?)?;
        index.write(&b)
    };
    match from {
        StoredFrom::Memory(ix) => stored::encode_each(ix, &mut emit)?,
        StoredFrom::Merge(inputs) => {
            let refs: Vec<&Stored> = inputs.iter().collect();
            let corrupt = |i: usize, t: &str| corrupt_postings(refs[i], t);
            stored::merge(&refs, &mut emit, corrupt)?
        }
    }
    ctx.writer.finish(terms)?;
    ctx.writer.finish(index)?;
    Ok(())
}

/// Writes the docs rows of `scope` (`bm25_docs`: each chunk's id and length; `bm25_file_docs`:
/// each file's path and length).
fn write_docs(
    ctx: &mut Ctx,
    kind: IndexKind,
    scope: &Scope,
    key: &str,
    docs: &[String],
    lengths: &[u32],
) -> Result<()> {
    match kind {
        IndexKind::Chunks => {
            let rows: Vec<DocRow> = docs
                .iter()
                .zip(lengths)
                .map(|(id, &length)| DocRow {
                    scope: scope.clone(),
                    chunk_id: id.clone(),
                    length,
                })
                .collect();
            ctx.writer.write(scope.as_str(), key, &rows)?;
        }
        IndexKind::Files => {
            let rows: Vec<FileDocRow> = docs
                .iter()
                .zip(lengths)
                .map(|(path, &length)| FileDocRow {
                    scope: scope.clone(),
                    repo: scope.to_string(),
                    path: path.clone(),
                    length,
                })
                .collect();
            ctx.writer.write(scope.as_str(), key, &rows)?;
        }
    }
    Ok(())
}

/// The lengths of a docs file, its rows renamed to the `*` scope (as a record batch).
fn docs_for_all(ctx: &Ctx, kind: IndexKind, file: &FileEntry) -> Result<(Vec<u32>, RecordBatch)> {
    match kind {
        IndexKind::Chunks => {
            let mut rows: Vec<DocRow> = ctx.store.read_rows_of(file, None)?;
            let lengths = rows.iter().map(|d| d.length).collect();
            for r in &mut rows {
                r.scope = Scope::all();
            }
            Ok((lengths, crate::artifact::schema::to_batch(&rows)?))
        }
        IndexKind::Files => {
            let mut rows: Vec<FileDocRow> = ctx.store.read_rows_of(file, None)?;
            let lengths = rows.iter().map(|d| d.length).collect();
            for r in &mut rows {
                r.scope = Scope::all();
            }
            Ok((lengths, crate::artifact::schema::to_batch(&rows)?))
        }
    }
}

/// The file of `table`/`part` this run has written or reused.
fn this_run(ctx: &Ctx, table: Table, part: &str) -> Result<FileEntry> {
    ctx.writer.entry(table, part).cloned().ok_or_else(|| {
        Error::stage(
            StageId::Index,
            format!("the `{table}` file of `{part}` is missing"),
        )
    })
}

/// The all-repository scope: a streaming merge of the stored per-repository indexes in
/// repository order, so its documents are numbered as if built over all chunks at once.
fn merge_all(
    ctx: &mut Ctx,
    kind: IndexKind,
    all: &str,
    scopes: &[String],
    key: &str,
) -> Result<()> {
    let [index_table, _, docs_table] = kind.tables();
    let schema = match kind {
        IndexKind::Chunks => DocRow::schema(),
        IndexKind::Files => FileDocRow::schema(),
    };
    // Each repository's documents are read once: their lengths open its index, and the rows go
    // on, renamed to the `*` scope, into that scope's docs table.
    let mut docs = ctx
        .writer
        .part(docs_table, all, key, schema, FileFormat::Parquet)?;
    // The inputs stay unopened until their group is merged: an opened input holds the pages
    // around where it was last read, so at most `MERGE_FAN_IN` are open at once.
    let mut inputs: Vec<(FileEntry, Vec<u32>)> = Vec::with_capacity(scopes.len());
    for scope in scopes {
        let (lengths, batch) = docs_for_all(ctx, kind, &this_run(ctx, docs_table, scope)?)?;
        inputs.push((this_run(ctx, index_table, scope)?, lengths));
        docs.write(&batch)?;
    }
    ctx.writer.finish(docs)?;
    // A merge maps pages ahead of where it reads in every input (the kernel maps cached pages
    // around each fault), so it takes at most `MERGE_FAN_IN` inputs at once; more are merged in
    // rounds through scratch files.
    let open = |ctx: &Ctx, group: Vec<(FileEntry, Vec<u32>)>| -> Result<Vec<Stored>> {
        group
            .into_iter()
            .map(|(entry, lengths)| open_mapped(ctx, &entry, lengths))
            .collect()
    };
    let mut round = 0;
    let mut scratch = Vec::new();
    while inputs.len() > MERGE_FAN_IN {
        let mut next = Vec::new();
        let mut rest = inputs.into_iter().peekable();
        while rest.peek().is_some() {
            let group: Vec<_> = rest.by_ref().take(MERGE_FAN_IN).collect();
            let opened = open(ctx, group)?;
            let name = format!("{}-merge-{round}-{}.arrow", index_table, next.len());
            let (path, mut entry) = ctx.writer.scratch(&name)?;
            let refs: Vec<&Stored> = opened.iter().collect();
            let corrupt = |i: usize, t: &str| {
                ArrowError::InvalidArgumentError(corrupt_postings(refs[i], t).to_string())
            };
            entry.bytes = write_scratch(&path, |w| stored::merge(&refs, |b| w.write(&b), corrupt))?;
            scratch.push(path);
            let lengths = opened
                .iter()
                .flat_map(|s| s.lengths().iter().copied())
                .collect();
            next.push((entry, lengths));
        }
        inputs = next;
        round += 1;
    }
    let opened = open(ctx, inputs)?;
    write_stored(ctx, kind, all, key, StoredFrom::Merge(&opened))?;
    drop(opened);
    for p in scratch {
        std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
    }
    Ok(())
}

/// The error of a merge input whose postings of `term` are corrupt.
fn corrupt_postings(input: &Stored, term: &str) -> Error {
    let path = input.origin().unwrap_or(Path::new("a stored index"));
    Error::artifact(path, format!("the postings of `{term}` are corrupt"))
}

/// Opens a stored index file for merging: mapped, with the pages it has read dropped as it goes.
fn open_mapped(ctx: &Ctx, file: &FileEntry, lengths: Vec<u32>) -> Result<Stored> {
    let mut st = open_stored(ctx.store, file, lengths)?;
    // SAFETY: `open_stored` decodes the batches in place over a read-only file mapping, which
    // they keep alive.
    unsafe { st.set_mapped() };
    Ok(st)
}
