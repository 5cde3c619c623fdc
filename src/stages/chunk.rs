//! chunk: turns each repository's `files` partition into line-addressed `chunks` with token counts
//! and stable ids; a partition whose files and settings are unchanged is reused.

use crate::artifact::{hash_json, sha256_hex, FileFormat};
use crate::config::Plan;
use crate::config::{ChunkConfig, ChunkMethod};
use crate::error::Result;
use crate::intellirag::chunker::chunk_chars;
use crate::pipeline::{Ctx, Stage};
use crate::schema::{to_batch, ChunkRow, FileRow, Row};
use crate::text::chunker::chunk_text;
use rayon::prelude::*;
use serde_json::{json, Value};

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
    match cfg.method {
        ChunkMethod::Lines => chunk_text(&f.text, &f.language, cfg.max_tokens, cfg.overlap_lines)
            .into_iter()
            .map(|p| {
                row(
                    p.start_line,
                    p.end_line,
                    p.heading,
                    p.kind,
                    p.tokens,
                    p.text,
                    (0, 0),
                )
            })
            .collect(),
        ChunkMethod::Intellirag => {
            let kind = crate::text::chunker::kind_of(&f.language);
            chunk_chars(&f.text)
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
                .collect()
        }
    }
}

impl Stage for Chunk {
    fn name(&self) -> &'static str {
        "chunk"
    }
    fn inputs(&self) -> &'static [&'static str] {
        &["scan"]
    }
    fn version(&self) -> u32 {
        // 2: chunks carry `join_at` and `join_line`.
        2
    }
    fn config(&self, plan: &Plan) -> Value {
        json!({ "chunk": plan.chunk })
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let cfg = ctx.plan.chunk.clone();
        let parts = ctx.store.files_of("files")?;
        let bar = ctx.bar(parts.len() as u64, "repos");
        let mut total = 0u64;
        for part in parts {
            let key = hash_json(&(&cfg, &part.sha256));
            if let Some(e) = ctx.writer.reuse("chunks", &part.part, &key)? {
                total += e.rows;
                bar.inc(1);
                continue;
            }
            // Files are read and chunked a slice at a time and the chunks streamed out, so memory
            // follows a slice, not the repository.
            let schema = ChunkRow::schema();
            let mut w = ctx.writer.part(
                ChunkRow::TABLE,
                &part.part,
                &key,
                schema,
                FileFormat::Parquet,
            )?;
            let (mut pending, mut written) = (Vec::<ChunkRow>::new(), 0u64);
            ctx.store
                .for_each_rows(&part, None, FILE_SLICE, |files: Vec<FileRow>| {
                    pending.extend(
                        files
                            .par_iter()
                            .flat_map_iter(|f| chunk_file(f, &cfg))
                            .collect::<Vec<_>>(),
                    );
                    let ready = pending.len() / WRITE_ROWS * WRITE_ROWS;
                    if ready > 0 {
                        let rest = pending.split_off(ready);
                        w.write(&to_batch(&pending)?)?;
                        written += ready as u64;
                        pending = rest;
                    }
                    Ok(())
                })?;
            if !pending.is_empty() || written == 0 {
                w.write(&to_batch(&pending)?)?;
                written += pending.len() as u64;
            }
            ctx.writer.finish(w)?;
            total += written;
            bar.inc(1);
        }
        bar.finish_and_clear();
        ctx.stat("chunks", total);
        Ok(())
    }
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
