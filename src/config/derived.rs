//! What a checked plan implies, read by the stages: its scopes, its chunkers, which optional
//! work its variants need, whether it answers questions, and its embedding model.

use super::{ChunkConfig, FileRanking, Plan, RepoSpec, Revision};
use crate::artifact::scope::Scope;
use crate::error::{Error, Result};
use crate::models::Embedder;

impl Plan {
    /// The repositories, by name.
    pub fn repo(&self, name: &str) -> Option<&RepoSpec> {
        self.repos.iter().find(|r| r.name == name)
    }

    /// Every scope of the run: each revision of each repository.
    pub fn scopes(&self) -> Vec<Scope> {
        self.repos
            .iter()
            .flat_map(|r| r.revisions.iter().map(|v| v.scope.clone()))
            .collect()
    }

    /// The repository and revision of a question scope (`django`, `django@0123abcd4567`).
    pub fn scope(&self, scope: &Scope) -> Option<(&RepoSpec, &Revision)> {
        let repo = self.repo(scope.repo_name())?;
        let rev = repo.revisions.iter().find(|r| &r.scope == scope)?;
        Some((repo, rev))
    }

    /// Whether a variant ranks whole files, so the index stage builds the whole-file index.
    pub fn file_index(&self) -> bool {
        self.variants
            .iter()
            .any(|v| v.retrieval.files != FileRanking::Chunks)
    }

    /// Whether a variant scores units with dense similarity, so the embed stage embeds every
    /// chunk's units too.
    pub fn unit_vectors(&self) -> bool {
        self.variants.iter().any(|v| v.packing.unit_dense > 0.0)
    }

    /// Every chunker the run chunks with: `None` for `[chunk]` (always), then each named one a
    /// variant uses.
    pub fn chunkers(&self) -> Vec<(Option<&str>, &ChunkConfig)> {
        std::iter::once((None, &self.chunk))
            .chain(self.chunkers.iter().map(|(n, c)| (Some(n.as_str()), c)))
            .collect()
    }

    /// Whether the stages that answer questions (retrieve and everything after) can run: the
    /// pipeline has variants and a question file; else why not.
    pub fn answers_questions(&self) -> std::result::Result<(), String> {
        if self.variants.is_empty() {
            return Err("the pipeline defines no [[variants]]".into());
        }
        if self.questions.is_none() {
            return Err("the pipeline names no question file".into());
        }
        Ok(())
    }

    /// The chunkers' names alone (see [`Plan::chunkers`]).
    pub fn chunker_names(&self) -> Vec<Option<&str>> {
        self.chunkers().into_iter().map(|(n, _)| n).collect()
    }

    /// The place of `v`'s chunker in [`Plan::chunker_names`] (the plan checked that it is there).
    pub fn chunker_index(&self, v: &super::Variant) -> usize {
        v.retrieval
            .chunker
            .as_ref()
            .and_then(|c| self.chunkers.keys().position(|k| k == c))
            .map_or(0, |i| i + 1)
    }

    /// What is wrong with the models the plan names, found before any stage runs: an `[embed]`
    /// model directory that is missing or lacks a file the model needs. (The stages would
    /// record the same in `errors` and report the dense variants as not run; this says why
    /// first.)
    pub fn model_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.embed {
            let dir = &e.model_dir;
            if !dir.is_dir() {
                out.push(format!(
                    "[embed] model: {}: no such model directory (relative paths resolve against the pipeline file's folder); fetch one with `ri-batch model fetch all-minilm-l6-v2 --dir <models folder>`; until then the variants that need vectors will not run",
                    dir.display()
                ));
            } else {
                for f in ["config.json", "tokenizer.json", "model.safetensors"] {
                    if !dir.join(f).is_file() {
                        out.push(format!(
                            "[embed] model: {}: no {f}; the variants that need vectors will not run",
                            dir.display()
                        ));
                    }
                }
            }
        }
        out
    }

    /// The plan's embedding model as `[embed]` configures it (device, length, width, precision):
    /// the embed stage and `serve` load it the same way.
    pub fn load_model(&self) -> Result<Embedder> {
        let e = self
            .embed
            .as_ref()
            .ok_or_else(|| Error::Invalid("the pipeline has no [embed] section".into()))?;
        let c = &e.config;
        Embedder::load_with(&e.model_dir, c.device, c.max_length, c.dims, c.dtype)
    }
}
