//! embed: vectors for every chunk (`embeddings`) and question (`question_embeddings`) with the
//! configured model, and for every chunk's units (`unit_embeddings`) when a variant scores units
//! with dense similarity (`unit_dense`). Vectors come from the content-keyed cache when the
//! (model, dims, text) was seen before, by any run; only new texts reach the model, longest
//! first, batched to a token budget.

use crate::artifact::remote::Remote;
use crate::artifact::schema::{
    embedding_fields, to_batch_with, ChunkRow, EmbeddingRow, QuestionRow, Row, Table,
};
use crate::artifact::StageId;
use crate::artifact::{hash_json, sha256_hex, VectorCache};
use crate::config::{EmbedPlan, Plan};
use crate::error::Result;
use crate::models::{model_id, precision_for, Device, Embedder, Precision, TextKind};
use crate::stages::{Ctx, Stage};
use crate::text::units::split_units;
use serde_json::{json, Value};
use std::time::Instant;

pub struct Embed;

/// Bumped when the compact packer's unit cutting changes, so unit vectors are made again.
const UNITS_VERSION: u32 = 1;

/// (id, text) of every unit of `chunks`, as the compact packer cuts them: what `unit_embeddings`
/// holds.
pub fn unit_items(chunks: &[ChunkRow]) -> Vec<(String, String)> {
    chunks
        .iter()
        .flat_map(|c| {
            split_units(&c.text, c.start_line, &c.kind, &c.heading)
                .into_iter()
                .enumerate()
                .map(|(i, u)| (EmbeddingRow::unit_id(&c.chunk_id, i), u.text))
        })
        .collect()
}

/// Texts sent to the model between two cache writes: what a crash can lose. Each group is
/// length-sorted and batched on its own and its last batches leave a core idle, so a group is
/// large (256 gave every 58 batches a wait and short batches of mixed lengths).
const CACHE_GROUP: usize = 4096;

/// The cache key of a text as embedded (prefix included, so documents and queries differ).
pub fn text_hash(prefixed: &str) -> String {
    sha256_hex(prefixed.as_bytes())[..32].to_string()
}

fn cfg(plan: &Plan) -> &EmbedPlan {
    plan.embed.as_ref().expect("enabled implies [embed]")
}

/// Vectors of a list of texts (with their hashes), and what it cost the model.
struct Embedded {
    vectors: Vec<(String, Vec<f32>)>,
    texts: usize,
    tokens: usize,
}

/// Embeds `texts` through the cache; returns the vectors and how many texts reached the model.
fn embed_cached(
    ctx: &Ctx,
    embedder: &Embedder,
    cache: &mut VectorCache,
    texts: &[String],
    kind: TextKind,
    batch_tokens: usize,
) -> Result<Embedded> {
    let hashes: Vec<String> = texts
        .iter()
        .map(|t| text_hash(&embedder.prefixed(t, kind)))
        .collect();
    let mut missing: Vec<usize> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, h) in hashes.iter().enumerate() {
        if !cache.contains(h) && seen.insert(h.clone()) {
            missing.push(i);
        }
    }
    let bar = ctx.bar(missing.len() as u64, "texts");
    let started = Instant::now();
    let mut tokens_total = 0usize;
    for group in missing.chunks(CACHE_GROUP) {
        let group_texts: Vec<String> = group.iter().map(|&i| texts[i].clone()).collect();
        let vectors = embedder.embed(&group_texts, kind, batch_tokens, |n, tokens| {
            tokens_total += tokens;
            bar.inc(n as u64);
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            bar.set_message(format!("{:.0} tokens/s", tokens_total as f64 / secs));
        })?;
        let items: Vec<(String, Vec<f32>)> = group
            .iter()
            .map(|&i| hashes[i].clone())
            .zip(vectors)
            .collect();
        cache.append(items)?;
    }
    bar.finish_and_clear();
    let vectors = cache.get_many(&hashes)?;
    let out = hashes.into_iter().zip(vectors).collect();
    Ok(Embedded {
        vectors: out,
        texts: missing.len(),
        tokens: tokens_total,
    })
}

/// One model's embedding work in a stage run: the cache and what reached the model.
struct Job<'a> {
    embedder: &'a Embedder,
    cache: VectorCache,
    batch_tokens: usize,
    texts: usize,
    tokens: usize,
}

impl Job<'_> {
    /// Partition key: everything the vectors of an input partition depend on.
    fn key(&self, plan: &Plan, input_sha: &str) -> String {
        let m = self.embedder;
        hash_json(&(
            m.id(),
            m.dims(),
            m.max_length(),
            plan.index.with_path,
            input_sha,
        ))
    }

    /// Embeds (id, text) items through the cache and writes them as `table`/`part`.
    fn write(
        &mut self,
        ctx: &mut Ctx,
        table: Table,
        part: &str,
        key: &str,
        items: Vec<(String, String)>,
        kind: TextKind,
    ) -> Result<()> {
        let texts: Vec<String> = items.iter().map(|(_, t)| t.clone()).collect();
        let got = embed_cached(
            ctx,
            self.embedder,
            &mut self.cache,
            &texts,
            kind,
            self.batch_tokens,
        )?;
        self.texts += got.texts;
        self.tokens += got.tokens;
        let rows: Vec<EmbeddingRow> = items
            .into_iter()
            .zip(got.vectors)
            .map(|((id, _), (text_hash, vector))| EmbeddingRow {
                id,
                text_hash,
                model: self.embedder.id().to_string(),
                vector,
            })
            .collect();
        let batch = to_batch_with(&embedding_fields(self.embedder.dims()), &rows)?;
        ctx.writer
            .write_batches(table, part, key, batch.schema(), &[batch])?;
        Ok(())
    }
}

impl Stage for Embed {
    fn id(&self) -> StageId {
        StageId::Embed
    }
    fn inputs(&self) -> &'static [StageId] {
        &[StageId::Chunk, StageId::Questions]
    }
    fn config(&self, plan: &Plan) -> Value {
        let e = plan.embed.as_ref();
        let mut config = json!({
            "model": e.map(|e| &e.model_dir),
            "max_length": e.map(|e| e.config.max_length),
            "dims": e.and_then(|e| e.config.dims),
            "with_path": plan.index.with_path,
        });
        if plan.unit_vectors() {
            config["units"] = json!(UNITS_VERSION);
        }
        config
    }
    fn probe(&self, plan: &Plan) -> Result<Value> {
        let Some(EmbedPlan {
            config: e,
            model_dir: dir,
            ..
        }) = &plan.embed
        else {
            return Ok(Value::Null);
        };
        let id = json!(model_id(dir).unwrap_or_else(|e| format!("unavailable: {e}")));
        // The precision the model will run in (its default depends on the device): part of the
        // output.
        let device = e.device;
        let precision = precision_for(dir, device, e.dtype);
        // A GPU asked for by name that cannot be opened fails the stage's model load, which is
        // recorded and the run goes on; the failure is part of the probe, so the run after the
        // GPU is fixed embeds instead of reusing the failed stage.
        if let d @ Device::Cuda(_) = device {
            if let Err(why) = d.open() {
                return Ok(json!([id, precision.name(), why]));
            }
        }
        Ok(match precision {
            Precision::F32 => id,
            p => json!([id, p.name()]),
        })
    }
    fn enabled(&self, plan: &Plan) -> std::result::Result<(), String> {
        match plan.embed {
            Some(_) => Ok(()),
            None => Err("the pipeline has no [embed] section".into()),
        }
    }
    fn run(&self, ctx: &mut Ctx) -> Result<()> {
        let plan = ctx.plan;
        let e = cfg(plan);
        let embedder = match plan.load_model() {
            Ok(m) => m,
            Err(err) => {
                // Dense and hybrid variants are then reported as not run; BM25 goes on.
                ctx.error(None, format!("{err}"));
                return Ok(());
            }
        };
        let cache_root = e.cache_dir.clone();
        // A cache on object storage: its parts are fetched into the mirror first (except those
        // compacted away here) and the new ones published when the stage is done.
        let sub = VectorCache::dir_name(embedder.id(), embedder.dims());
        let remote = match &e.cache_remote {
            Some(url) => {
                let r = Remote::connect(url)?;
                let local = cache_root.join(&sub);
                let pulled = r.pull_dir(&local, &sub, &VectorCache::compacted(&local))?;
                ctx.stat("cache_parts_pulled", pulled.objects);
                Some(r)
            }
            None => None,
        };
        let mut job = Job {
            embedder: &embedder,
            cache: VectorCache::open(&cache_root, embedder.id(), embedder.dims())?,
            batch_tokens: e.config.batch_tokens,
            texts: 0,
            tokens: 0,
        };
        let started = Instant::now();
        // Each chunk partition's vectors, and its units' when a variant scores units densely;
        // the chunks are read once, and only when something is not reused.
        let want_units = plan.unit_vectors();
        for part in ctx.store.files_of(ChunkRow::TABLE)? {
            let key = job.key(plan, &part.sha256);
            let chunks_due = ctx
                .writer
                .reuse(EmbeddingRow::CHUNKS, &part.part, &key)?
                .is_none();
            // Unit vectors also depend on how units are cut.
            let unit_key = hash_json(&(&key, UNITS_VERSION));
            let units_due = want_units
                && ctx
                    .writer
                    .reuse(EmbeddingRow::UNITS, &part.part, &unit_key)?
                    .is_none();
            if !chunks_due && !units_due {
                continue;
            }
            let chunks: Vec<ChunkRow> = ctx.store.read_rows(&part)?;
            if chunks_due {
                let items = chunks
                    .iter()
                    .map(|c| (c.chunk_id.clone(), c.indexed_text(plan.index.with_path)))
                    .collect();
                let kind = TextKind::Document;
                job.write(ctx, EmbeddingRow::CHUNKS, &part.part, &key, items, kind)?;
            }
            if units_due {
                let items = unit_items(&chunks);
                let kind = TextKind::Document;
                job.write(ctx, EmbeddingRow::UNITS, &part.part, &unit_key, items, kind)?;
            }
        }
        if let Some(qpart) = ctx.store.files_of(QuestionRow::TABLE)?.into_iter().next() {
            let key = job.key(plan, &qpart.sha256);
            if ctx
                .writer
                .reuse(EmbeddingRow::QUESTIONS, QuestionRow::TABLE.name(), &key)?
                .is_none()
            {
                let questions: Vec<QuestionRow> = ctx.store.read_rows(&qpart)?;
                let items = questions
                    .iter()
                    .map(|q| (q.question_id.clone(), q.question.clone()))
                    .collect();
                job.write(
                    ctx,
                    EmbeddingRow::QUESTIONS,
                    QuestionRow::TABLE.name(),
                    &key,
                    items,
                    TextKind::Query,
                )?;
            }
        }
        let (embedded, tokens, cache_size) = (job.texts, job.tokens, job.cache.len());
        drop(job);
        if let Some(r) = remote {
            let local = cache_root.join(&sub);
            let pushed = r.push_dir(&local, &sub, &VectorCache::compacted(&local))?;
            ctx.stat("cache_parts_pushed", pushed.objects);
        }
        let secs = started.elapsed().as_secs_f64();
        ctx.stat("model", embedder.id());
        ctx.stat("dims", embedder.dims());
        ctx.stat("embedded_texts", embedded);
        ctx.stat("embedded_tokens", tokens);
        ctx.stat("cache_size", cache_size);
        if embedded > 0 {
            ctx.stat("tokens_per_second", tokens as f64 / secs.max(1e-9));
        }
        Ok(())
    }
}
