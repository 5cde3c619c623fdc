//! chunk: turns each repository's `files` partition into line-addressed `chunks` with token counts
//! and stable ids; a partition whose files and settings are unchanged is reused. A repository read
//! at several revisions keeps each chunk once, and each revision's rows go to `scope_members`.

use crate::artifact::readers::Parts;
use crate::artifact::schema::{to_batch, ChunkRow, FileRow, MembersRow, Row, Scope, TreeRow};
use crate::artifact::StageId;
use crate::artifact::{hash_json, sha256_hex, FileFormat};
use crate::config::Plan;
use crate::config::{ChunkConfig, ChunkMethod};
use crate::error::Result;
use crate::packing::intellirag::chunker::chunk_chars;
use crate::stages::{Ctx, Stage};
use crate::text::chunker::chunk_text;
use crate::text::syntax::{chunk_syntax, SyntaxOutcome};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

/// Files read and chunked at a time (in parallel). A slice's files, their chunks and the Arrow
/// copies of both are in memory together, and a large repository's files run to megabytes each:
/// at 457 repositories, 256 files a slice peaked at 96 MB, 32 at 72 MB, 8 at 52 MB.
const FILE_SLICE: usize = 8;

/// Chunks are written in whole multiples of this many rows (the Parquet writer's mini-batch), so
/// the file's bytes do not depend on how the files were sliced.
const WRITE_ROWS: usize = 1024;

pub struct Chunk;

/// Stable chunk id: a hash of repo, path, span and text.
pub fn chunk_id(repo: &str, path: &str, start: u32, end: u32, text: &str) -> String {
    let h = sha256_hex(format!("{repo}\0{path}\0{start}\0{end}\0{text}").as_bytes());
    h[..20].to_string()
}

/// Chunks of one file.
pub fn chunk_file(f: &FileRow, cfg: &ChunkConfig) -> Vec<ChunkRow> {
    chunk_file_with(f, cfg).0
}

/// Chunks of one file, and how the syntax chunker took it (`method = "syntax"` only).
fn chunk_file_with(f: &FileRow, cfg: &ChunkConfig) -> (Vec<ChunkRow>, Option<SyntaxOutcome>) {
    let row =
        |start_line, end_line, heading, kind: &str, tokens, text: String, join: (u32, u32)| {
            ChunkRow {
                chunk_id: chunk_id(&f.repo, &f.path, start_line, end_line, &text),
                repo: f.repo.clone(),
                commit: f.commit.clone(),
                path: f.path.clone(),
                start_line,
                end_line,
                heading,
                kind: kind.to_string(),
                tokens,
                text,
                join_at: join.0,
                join_line: join.1,
            }
        };
    let pieces = |pieces: Vec<crate::text::chunker::Piece>| {
        pieces
            .into_iter()
            .map(|p| {
                let (s, e) = (p.start_line, p.end_line);
                row(s, e, p.heading, p.kind, p.tokens, p.text, (0, 0))
            })
            .collect()
    };
    match cfg.method {
        ChunkMethod::Lines => (
            pieces(chunk_text(
                &f.text,
                &f.language,
                cfg.max_tokens,
                cfg.overlap_lines,
            )),
            None,
        ),
        ChunkMethod::Syntax => {
            let (p, outcome) = chunk_syntax(
                &f.text,
                &f.language,
                &f.path,
                cfg.max_tokens,
                cfg.overlap_lines,
            );
            (pieces(p), Some(outcome))
        }
        ChunkMethod::Intellirag => {
            let kind = crate::text::chunker::kind_of(&f.language);
            let rows = chunk_chars(&f.text)
                .into_iter()
                .map(|c| {
                    let join = (c.join_at, c.join_line);
                    row(
                        c.start_line,
                        c.end_line,
                        c.heading,
                        kind,
                        c.tokens,
                        c.text,
                        join,
                    )
                })
                .collect();
            (rows, None)
        }
    }
}

impl Stage for Chunk {
    fn id(&self) -> StageId {
        StageId::Chunk
    }
    fn inputs(&self) -> &'static [StageId] {
        &[StageId::Scan]
    }
    fn version(&self) -> u32 {
        // 2: chunks carry `join_at` and `join_line`; 3: a repository read at several revisions
        // stores each chunk once and writes `scope_members`.
        3
    }
    fn config(&self, plan: &Plan) -> Value {
        let mut v = json!({ "chunk": plan.chunk });
        if !plan.chunkers.is_empty() {
            v["chunkers"] = json!(plan.chunkers);
        }
        v
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let parts = ctx.store.files_of(FileRow::TABLE)?;
        let trees = Parts::of(ctx.store, TreeRow::TABLE)?;
        let plan = ctx.plan;
        let chunkers = plan.chunkers();
        let bar = ctx.bar((parts.len() * chunkers.len()) as u64, "repos");
        let (mut total, mut shared) = (0u64, 0u64);
        let mut outcomes: BTreeMap<Option<&str>, BTreeMap<SyntaxOutcome, u64>> = BTreeMap::new();
        for part in parts {
            // The revisions of this repository: when it is read at several, each gets the rows
            // of its own files.
            let tree = trees.get(&part.part);
            let by_scope = match tree {
                Some(t) => scopes_of(ctx.store.read_rows::<TreeRow>(t)?),
                None => Vec::new(),
            };
            let many = by_scope.len() != 1 || by_scope[0].0 != part.part;
            let repo = ctx.store.part_scope(&part)?;
            for &(chunker, cfg) in &chunkers {
                let key = hash_json(&(cfg, &part.sha256, tree.map(|t| &t.sha256)));
                let out_part = repo.with_chunker(chunker);
                let job = Job {
                    part: &part,
                    chunker,
                    out_part: &out_part,
                    key: &key,
                    cfg,
                    many,
                };
                let (rows, sh, o) = chunk_repo(ctx, &job, &by_scope)?;
                total += rows;
                shared += sh;
                let mine = outcomes.entry(chunker).or_default();
                for (o, n) in o {
                    *mine.entry(o).or_default() += n;
                }
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        ctx.stat("chunks", total);
        if shared > 0 {
            ctx.stat("chunks_shared_by_revisions", shared);
        }
        for (name, cfg) in chunkers {
            if cfg.method == ChunkMethod::Syntax {
                // Files chunked in this run (reused partitions are not counted again), by how the
                // syntax chunker took them; every file not `parsed` has line chunks.
                let by: BTreeMap<&str, u64> = outcomes
                    .get(&name)
                    .into_iter()
                    .flatten()
                    .map(|(o, n)| (o.name(), *n))
                    .collect();
                let stat = match name {
                    None => "syntax_files".to_string(),
                    Some(n) => format!("syntax_files:{n}"),
                };
                ctx.stat(&stat, json!(by));
            }
        }
        Ok(())
    }
}

/// One repository's files under one chunker: the `files` partition, the chunker (`None`:
/// `[chunk]`), the chunk partition it writes (`repo`, or `repo~name`), its key and settings.
struct Job<'a> {
    part: &'a crate::artifact::FileEntry,
    chunker: Option<&'a str>,
    out_part: &'a Scope,
    key: &'a str,
    cfg: &'a ChunkConfig,
    many: bool,
}

/// Chunks one repository under one chunker, or reuses its partitions; returns the rows, the
/// chunk occurrences shared by revisions, and how the syntax chunker took the files.
fn chunk_repo(
    ctx: &mut Ctx,
    job: &Job,
    by_scope: &[(Scope, Vec<(String, String)>)],
) -> Result<(u64, u64, BTreeMap<SyntaxOutcome, u64>)> {
    let mut reused = ctx
        .writer
        .reuse(ChunkRow::TABLE, job.out_part.as_str(), job.key)?;
    if job.many
        && ctx
            .writer
            .reuse(MembersRow::TABLE, job.out_part.as_str(), job.key)?
            .is_none()
    {
        reused = None;
    }
    if let Some(e) = reused {
        return Ok((e.rows, 0, BTreeMap::new()));
    }
    let rows = chunk_part(ctx, job)?;
    if job.many {
        let members: Vec<MembersRow> = by_scope
            .iter()
            .map(|(scope, tree)| {
                let mut m = MembersRow {
                    repo: job.out_part.to_string(),
                    scope: scope.with_chunker(job.chunker),
                    chunks: Vec::new(),
                    files: Vec::new(),
                };
                for f in tree {
                    if let Some((file_row, chunks)) = rows.of_file.get(f) {
                        m.files.push(*file_row);
                        m.chunks.extend(chunks);
                    }
                }
                m
            })
            .collect();
        ctx.writer.write(job.out_part.as_str(), job.key, &members)?;
    }
    Ok((rows.written, rows.shared, rows.outcomes))
}

/// A repository's tree rows by scope, in the order the scan wrote them: each revision's (path,
/// blob) in listing order.
fn scopes_of(rows: Vec<TreeRow>) -> Vec<(Scope, Vec<(String, String)>)> {
    let mut out: Vec<(Scope, Vec<(String, String)>)> = Vec::new();
    for t in rows {
        match out.last_mut() {
            Some((s, v)) if *s == t.scope => v.push((t.path, t.blob_id)),
            _ => out.push((t.scope, vec![(t.path, t.blob_id)])),
        }
    }
    out
}

/// What chunking one repository's files left: rows written, chunk occurrences that an earlier
/// file version already had (stored once), and per (path, blob) its `files` row and its chunks'
/// rows (kept only for a repository read at several revisions).
struct Chunked {
    written: u64,
    shared: u64,
    of_file: HashMap<(String, String), (u32, Vec<u32>)>,
    /// Files by how the syntax chunker took them.
    outcomes: BTreeMap<SyntaxOutcome, u64>,
}

/// Chunks one `files` partition into its `chunks` partition, a slice of files at a time. For a
/// repository read at several revisions, a chunk (same path, span and text) that an earlier
/// file version already had is stored once, and each file version's chunk rows are returned.
fn chunk_part(ctx: &mut Ctx, job: &Job) -> Result<Chunked> {
    let (part, cfg, many) = (job.part, job.cfg, job.many);
    let mut w = ctx.writer.part(
        ChunkRow::TABLE,
        job.out_part.as_str(),
        job.key,
        ChunkRow::schema(),
        FileFormat::Parquet,
    )?;
    let mut out = Chunked {
        written: 0,
        shared: 0,
        of_file: HashMap::new(),
        outcomes: BTreeMap::new(),
    };
    let mut row_of: HashMap<String, u32> = HashMap::new();
    let (mut pending, mut next_row, mut file_row) = (Vec::<ChunkRow>::new(), 0u32, 0u32);
    // Files are read and chunked a slice at a time and the chunks streamed out, so memory
    // follows a slice, not the repository.
    ctx.store
        .for_each_rows(part, None, FILE_SLICE, |files: Vec<FileRow>| {
            let chunked: Vec<(Vec<ChunkRow>, Option<SyntaxOutcome>)> =
                files.par_iter().map(|f| chunk_file_with(f, cfg)).collect();
            for (f, (chunks, outcome)) in files.iter().zip(chunked) {
                if let Some(o) = outcome {
                    *out.outcomes.entry(o).or_default() += 1;
                }
                let mut rows = Vec::new();
                for c in chunks {
                    if many {
                        if let Some(&r) = row_of.get(&c.chunk_id) {
                            rows.push(r);
                            out.shared += 1;
                            continue;
                        }
                        row_of.insert(c.chunk_id.clone(), next_row);
                        rows.push(next_row);
                    }
                    next_row += 1;
                    pending.push(c);
                }
                if many {
                    out.of_file
                        .insert((f.path.clone(), f.blob_id.clone()), (file_row, rows));
                }
                file_row += 1;
            }
            let ready = pending.len() / WRITE_ROWS * WRITE_ROWS;
            if ready > 0 {
                let rest = pending.split_off(ready);
                w.write(&to_batch(&pending)?)?;
                out.written += ready as u64;
                pending = rest;
            }
            Ok(())
        })?;
    if !pending.is_empty() || out.written == 0 {
        w.write(&to_batch(&pending)?)?;
        out.written += pending.len() as u64;
    }
    ctx.writer.finish(w)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_depend_on_span_and_text() {
        let a = chunk_id("r", "p", 1, 2, "x");
        assert_eq!(a, chunk_id("r", "p", 1, 2, "x"));
        assert_ne!(a, chunk_id("r", "p", 1, 3, "x"));
        assert_ne!(a, chunk_id("r", "p", 1, 2, "y"));
        assert_eq!(a.len(), 20);
    }
}
