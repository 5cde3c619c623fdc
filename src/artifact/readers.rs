//! Readers of the artifacts that later stages need: BM25 scopes opened in place, the vectors of
//! one repository, the variants retrieve could not run. They live with the storage layer, so that
//! no stage imports another, and each reads one repository partition at a time.

use crate::artifact::outcomes::NotRun;
use crate::artifact::schema::{
    ChunkRow, DocRow, EmbeddingRow, FileDocRow, MembersRow, QuestionRow, RetrievalRow, Row, Table,
    TermRow,
};
use crate::artifact::scope::Scope;
use crate::artifact::{FileEntry, Store};
use crate::error::{Error, Result};
use crate::retrieval::bm25::stored::Stored;
use crate::retrieval::bm25::{Params, Searcher, Subset, SubsetSearcher};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Table of the stored BM25 index (CSR postings, Arrow IPC), one file per scope.
pub const BM25_INDEX: Table = Table::Bm25Index;

/// One scope's BM25 index, searched in place: a repository's own, the one over all repositories,
/// or one revision of a repository read at several (its repository's index, over its members).
pub struct Bm25Scope {
    /// The index, shared by the revisions of a batch.
    pub index: Arc<Stored>,
    /// Chunk id of each document of the index, by internal number (empty when opened without
    /// them).
    pub chunk_ids: Arc<Vec<String>>,
    /// For a revision's scope, its documents (index numbers) in its own order.
    pub subset: Option<Subset>,
}

/// A worker's searcher over a scope (length norms and accumulator built once).
pub enum ScopeSearcher<'a> {
    Whole(Searcher<'a, Stored>),
    Subset(SubsetSearcher<'a, Stored>),
}

impl ScopeSearcher<'_> {
    /// The `k` best documents for analysed `query`, as [`Bm25Scope::search`].
    pub fn search(&mut self, query: &[String], k: usize) -> Vec<(u32, f64)> {
        match self {
            ScopeSearcher::Whole(s) => s.search(query, k),
            ScopeSearcher::Subset(s) => s.search(query, k),
        }
    }
}

impl Bm25Scope {
    /// Documents in the scope.
    pub fn len(&self) -> usize {
        self.subset.as_ref().map_or(self.index.len(), |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Documents of the scope holding `term`.
    pub fn df(&self, term: &str) -> usize {
        match &self.subset {
            None => self.index.df(term),
            Some(s) => s.df(&*self.index, term),
        }
    }

    /// Lucene idf of `term` in the scope.
    pub fn idf(&self, term: &str) -> f64 {
        crate::retrieval::bm25::lucene_idf(self.len(), self.df(term))
    }

    /// Lucene idf of `term`, a term the scope lacks weighing most (see [`Stored::idf_or_max`]).
    pub fn idf_or_max(&self, term: &str) -> f64 {
        let (n, df) = (self.len() as f64, self.df(term) as f64);
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// The scope's documents (index numbers), in its own order.
    pub fn docs(&self) -> Vec<u32> {
        match &self.subset {
            None => (0..self.index.len() as u32).collect(),
            Some(s) => s.members().to_vec(),
        }
    }

    /// A searcher for repeated queries: (index document, score), ranked and tied as an index over
    /// the scope alone would.
    pub fn searcher(&self, p: Params) -> ScopeSearcher<'_> {
        match &self.subset {
            None => ScopeSearcher::Whole(Searcher::new(&*self.index, p)),
            Some(s) => ScopeSearcher::Subset(SubsetSearcher::new(&*self.index, s, p)),
        }
    }

    /// The `k` best documents of the scope for analysed `query` (see [`Bm25Scope::searcher`]).
    pub fn search(&self, query: &[String], k: usize, p: Params) -> Vec<(u32, f64)> {
        self.searcher(p).search(query, k)
    }
}

/// The columns of an embedding row that search needs.
#[derive(serde::Deserialize)]
struct IdVector {
    id: String,
    vector: Vec<f32>,
}

#[derive(serde::Deserialize)]
struct DocLength {
    length: u32,
}

/// Which of a run's two BM25 indexes: over chunks (`bm25_index`, the default), or over whole
/// files (`bm25_file_index`, for the variants that rank files `whole`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    Chunks,
    Files,
}

impl IndexKind {
    /// The tables of one scope of this index: (index, terms, docs).
    pub fn tables(self) -> [Table; 3] {
        match self {
            IndexKind::Chunks => [BM25_INDEX, TermRow::TABLE, DocRow::TABLE],
            IndexKind::Files => [FileDocRow::INDEX, FileDocRow::TERMS, FileDocRow::TABLE],
        }
    }

    /// The column of the docs table that names each document.
    fn id_column(self) -> &'static str {
        match self {
            IndexKind::Chunks => "chunk_id",
            IndexKind::Files => "path",
        }
    }
}

#[derive(serde::Deserialize)]
struct DocId {
    #[serde(alias = "path")]
    chunk_id: String,
    length: u32,
}

/// The BM25 scopes of a run: which exist, and opening one (a repository's, `*`, or a revision of
/// a repository read at several: its repository's index over its members).
pub struct Bm25Scopes<'a> {
    store: &'a Store,
    kind: IndexKind,
    files: HashMap<Scope, (FileEntry, FileEntry)>,
    members: Parts,
}

impl<'a> Bm25Scopes<'a> {
    /// The committed chunk scopes of the index stage.
    pub fn new(store: &'a Store) -> Result<Bm25Scopes<'a>> {
        Bm25Scopes::of_kind(store, IndexKind::Chunks)
    }

    /// The committed scopes of one of the index stage's indexes.
    pub fn of_kind(store: &'a Store, kind: IndexKind) -> Result<Bm25Scopes<'a>> {
        let [index_table, _, docs_table] = kind.tables();
        let mut index: HashMap<Scope, FileEntry> = HashMap::new();
        let mut docs: HashMap<String, FileEntry> = HashMap::new();
        if let Some(m) = store.manifest(crate::artifact::StageId::Index)? {
            for f in m.files {
                if f.is(index_table) {
                    index.insert(store.part_scope(&f)?, f);
                } else if f.is(docs_table) {
                    docs.insert(f.part.clone(), f);
                }
            }
        }
        let files = index
            .into_iter()
            .filter_map(|(scope, ix)| docs.remove(scope.as_str()).map(|d| (scope, (ix, d))))
            .collect();
        Ok(Bm25Scopes {
            store,
            kind,
            files,
            members: Parts::of(store, MembersRow::TABLE)?,
        })
    }

    /// The index a question about `repo` searches: its repository's (for a revision too), or for
    /// `*` the scope over all repositories, which is the only repository's own when the run has
    /// one.
    pub fn scope_of(&self, repo: &Scope) -> Option<&Scope> {
        if let Some((k, _)) = self.files.get_key_value(repo.group()) {
            return Some(k);
        }
        // `*` (or a chunker's `*~name`) of a run with one repository is that repository's.
        let want = repo.over_all()?;
        let mut mine = self.files.keys().filter(|k| k.chunker() == want);
        match (mine.next(), mine.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }

    /// The checksums of the files that `repo`'s scope is read from (empty when it has none): part
    /// of the key of every partition computed from that scope.
    pub fn checksums(&self, repo: &Scope) -> Vec<&str> {
        let mut sums: Vec<&str> = self
            .scope_of(repo)
            .map(|s| &self.files[s])
            .map(|(ix, docs)| vec![ix.sha256.as_str(), docs.sha256.as_str()])
            .unwrap_or_default();
        if let Some(m) = self.members.get(repo.group()) {
            sums.push(m.sha256.as_str());
        }
        sums
    }

    /// [`Bm25Scopes::checksums`] of `scope` under every chunker in `chunkers`, in their order.
    pub fn checksums_of(&self, scope: &Scope, chunkers: &[Option<&str>]) -> Vec<&str> {
        chunkers
            .iter()
            .flat_map(|c| self.checksums(&scope.with_chunker(*c)))
            .collect()
    }

    /// [`Bm25Scopes::open_batch`] of the scopes `batch` under every chunker in `chunkers`.
    pub fn open_batch_of(
        &self,
        batch: &[Scope],
        chunkers: &[Option<&str>],
        ids: bool,
    ) -> Result<Bm25Batch> {
        let all: Vec<Scope> = batch
            .iter()
            .flat_map(|s| chunkers.iter().map(|c| s.with_chunker(*c)))
            .collect();
        self.open_batch(&all, ids)
    }

    /// Opens the scope of `repo` (see [`Bm25Scopes::scope_of`]); with `ids`, also the id of every
    /// document (chunk ids; paths for the file index). A revision of a repository read at several
    /// without members (it could not be read) has no scope.
    pub fn open(&self, repo: &Scope, ids: bool) -> Result<Option<Bm25Scope>> {
        Ok(self
            .open_batch(std::slice::from_ref(repo), ids)?
            .scope(repo))
    }

    /// What the scopes `repos` share, read once: each index they search, opened in place with its
    /// documents' ids (with `ids`) and lengths, and the members of each revision among them. Its
    /// [`Bm25Batch::scope`] of each of them equals [`Bm25Scopes::open`] of it.
    pub fn open_batch(&self, repos: &[Scope], ids: bool) -> Result<Bm25Batch> {
        let mut batch = Bm25Batch {
            scope_of: repos
                .iter()
                .filter_map(|r| self.scope_of(r).map(|s| (r.clone(), s.clone())))
                .collect(),
            ..Bm25Batch::default()
        };
        let mut wanted: BTreeMap<Scope, Vec<&Scope>> = BTreeMap::new();
        for (repo, scope) in &batch.scope_of {
            wanted.entry(scope.clone()).or_default().push(repo);
        }
        for (scope, repos) in wanted {
            let revisions: HashSet<&str> = repos
                .iter()
                .filter(|r| !r.is_all())
                .map(|r| r.as_str())
                .collect();
            if let (Some(part), false) = (self.members.get(scope.as_str()), revisions.is_empty()) {
                // Revisions of a repository read at several: their members' rows (a revision
                // without one could not be read, and has no scope).
                let rows: Vec<MembersRow> = self.store.read_where(
                    &[part],
                    &["repo", "scope", "chunks", "files"],
                    "scope",
                    |s| revisions.contains(s),
                )?;
                for m in rows {
                    let members = match self.kind {
                        IndexKind::Chunks => m.chunks,
                        IndexKind::Files => m.files,
                    };
                    batch.members.insert(m.scope, members);
                }
            }
            let (index, chunk_ids) = self.open_index(&scope, ids)?;
            let opened = Opened {
                index: Arc::new(index),
                ids: Arc::new(chunk_ids),
                many: self.members.get(scope.as_str()).is_some(),
            };
            batch.opened.insert(scope, opened);
        }
        Ok(batch)
    }

    /// Opens the index of `scope` in place, with the ids of its documents when `ids`.
    fn open_index(&self, scope: &Scope, ids: bool) -> Result<(Stored, Vec<String>)> {
        let (ix, docs) = &self.files[scope];
        let over_all = scope.over_all() == Some(None);
        let (chunk_ids, lengths) = if ids && self.kind == IndexKind::Files && over_all {
            // Over all repositories a file is named `repo/path`.
            let rows: Vec<FileDocRow> = self.store.read_rows_of(docs, None)?;
            rows.into_iter()
                .map(|r| (format!("{}/{}", r.repo, r.path), r.length))
                .unzip()
        } else if ids {
            let rows: Vec<DocId> = self
                .store
                .read_rows_of(docs, Some(&[self.kind.id_column(), "length"]))?;
            rows.into_iter().map(|r| (r.chunk_id, r.length)).unzip()
        } else {
            let rows: Vec<DocLength> = self.store.read_rows_of(docs, Some(&["length"]))?;
            (Vec::new(), rows.into_iter().map(|r| r.length).collect())
        };
        Ok((open_stored(self.store, ix, lengths)?, chunk_ids))
    }
}

/// An index opened for a batch: the index, its documents' ids, and whether its repository is
/// read at several revisions (each revision then searches its members).
struct Opened {
    index: Arc<Stored>,
    ids: Arc<Vec<String>>,
    many: bool,
}

/// The BM25 scopes of a batch, opened once ([`Bm25Scopes::open_batch`]).
#[derive(Default)]
pub struct Bm25Batch {
    /// Each index scope, opened.
    opened: HashMap<Scope, Opened>,
    /// The index scope each asked scope searches.
    scope_of: HashMap<Scope, Scope>,
    /// The members of each revision asked.
    members: HashMap<Scope, Vec<u32>>,
}

impl Bm25Batch {
    /// The scope of `repo`, one of those the batch was opened for (see [`Bm25Scopes::open`]).
    pub fn scope(&self, repo: &Scope) -> Option<Bm25Scope> {
        let scope = self.scope_of.get(repo)?;
        let opened = self.opened.get(scope)?;
        let subset = if opened.many && !repo.is_all() {
            let members = self.members.get(repo)?.clone();
            Some(Subset::new(opened.index.len(), members))
        } else {
            None
        };
        Some(Bm25Scope {
            index: Arc::clone(&opened.index),
            chunk_ids: Arc::clone(&opened.ids),
            subset,
        })
    }

    /// [`Bm25Batch::scope`] of `scope` under every chunker in `chunkers`, in their order.
    pub fn scopes_of(&self, scope: &Scope, chunkers: &[Option<&str>]) -> Vec<Option<Bm25Scope>> {
        chunkers
            .iter()
            .map(|c| self.scope(&scope.with_chunker(*c)))
            .collect()
    }
}

/// Maps a stored index file (`bm25_index`, or a scratch file of the index stage) and opens it
/// in place with its documents' lengths.
pub fn open_stored(store: &Store, file: &FileEntry, lengths: Vec<u32>) -> Result<Stored> {
    let batches = store.map_ipc(file)?;
    let path = store.root().join(&file.path);
    match Stored::open(&batches, lengths) {
        Ok(st) => Ok(st.read_from(path)),
        Err(e) => Err(Error::artifact(path, e)),
    }
}

/// Unit vectors of a set of chunks, row-major.
pub struct Vectors {
    pub dims: usize,
    pub ids: Vec<String>,
    pub data: Vec<f32>,
}

impl Vectors {
    fn from_rows(rows: Vec<IdVector>) -> Vectors {
        let dims = rows.first().map_or(0, |e| e.vector.len());
        let mut v = Vectors {
            dims,
            ids: Vec::with_capacity(rows.len()),
            data: Vec::with_capacity(rows.len() * dims),
        };
        for e in rows {
            v.data.extend_from_slice(&e.vector);
            v.ids.push(e.id);
        }
        v
    }

    /// The vectors of `ids`, in that order (ids without a vector are left out).
    pub fn select<'i>(&self, ids: impl Iterator<Item = &'i str>) -> Vectors {
        let at: HashMap<&str, usize> = self
            .ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        let mut v = Vectors {
            dims: self.dims,
            ids: Vec::new(),
            data: Vec::new(),
        };
        for id in ids {
            if let Some(&i) = at.get(id) {
                v.ids.push(id.to_string());
                v.data
                    .extend_from_slice(&self.data[i * self.dims..(i + 1) * self.dims]);
            }
        }
        v
    }

    /// Whether the embed stage has produced chunk vectors.
    pub fn available(store: &Store) -> Result<bool> {
        Ok(store.manifest(crate::artifact::StageId::Embed)?.is_some()
            && !store.files_of(EmbeddingRow::CHUNKS)?.is_empty())
    }

    /// The chunk vectors in `parts` (a scope's partitions of `embeddings`: see
    /// [`Parts::of_scope`]; for `*` every vector of the run, the one cross-repository read).
    pub fn of(store: &Store, parts: &[&FileEntry]) -> Result<Vectors> {
        let mut rows = Vec::new();
        for f in parts {
            rows.extend(store.read_rows_of::<IdVector>(f, Some(&["id", "vector"]))?);
        }
        Ok(Vectors::from_rows(rows))
    }

    /// The unit vectors (`unit_embeddings`, id [`EmbeddingRow::unit_id`]) of the chunks in
    /// `chunks`, from a scope's partitions `parts`: only their rows are decoded
    /// ([`Store::read_where`]), so memory follows the pooled chunks, not the scope's units.
    pub fn units_of(
        store: &Store,
        parts: &[&FileEntry],
        chunks: &HashSet<&str>,
    ) -> Result<HashMap<String, Vec<f32>>> {
        let of_pooled = |id: &str| chunks.contains(id.rsplit_once('#').map_or("", |(c, _)| c));
        let rows: Vec<IdVector> = store.read_where(parts, &["id", "vector"], "id", of_pooled)?;
        Ok(rows.into_iter().map(|r| (r.id, r.vector)).collect())
    }

    /// Question vectors by question id.
    pub fn questions(store: &Store) -> Result<HashMap<String, Vec<f32>>> {
        let mut out = HashMap::new();
        for f in store.files_of(EmbeddingRow::QUESTIONS)? {
            for r in store.read_rows_of::<IdVector>(&f, Some(&["id", "vector"]))? {
                out.insert(r.id, r.vector);
            }
        }
        Ok(out)
    }
}

/// The retrieve manifest's statistic naming the variants it could not run.
pub const NOT_RUN: &str = "not_run";

/// The variants the retrieve stage could not run, with the reason (from its manifest); an
/// unreadable record is an error naming the manifest, never "every variant ran".
pub fn not_run(store: &Store) -> Result<BTreeMap<String, NotRun>> {
    let stage = crate::artifact::StageId::Retrieve;
    let Some(v) = store
        .manifest(stage)?
        .and_then(|m| m.stats.get(NOT_RUN).cloned())
    else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_value(v).map_err(|e| {
        Error::artifact(
            store.root().join(stage.name()).join("manifest.json"),
            format!("`stats.{NOT_RUN}`: {e}"),
        )
    })
}

/// The chunks whose ids are in `ids` among the chunk partitions `parts`, read one partition at a
/// time with only the columns of [`ChunkRow`]: memory follows the chunks asked for, not the corpus.
pub fn chunks_by_id(
    store: &Store,
    parts: &[&FileEntry],
    ids: &HashSet<&str>,
) -> Result<HashMap<String, ChunkRow>> {
    let fields = ChunkRow::fields();
    let cols: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    let rows: Vec<ChunkRow> = store.read_where(parts, &cols, "chunk_id", |id| ids.contains(id))?;
    Ok(rows.into_iter().map(|c| (c.chunk_id.clone(), c)).collect())
}

/// The committed partitions of one table, by partition name.
#[derive(Default)]
pub struct Parts(BTreeMap<String, FileEntry>);

impl Parts {
    /// The partitions of `table`.
    pub fn of(store: &Store, table: Table) -> Result<Parts> {
        Ok(Parts(
            store
                .files_of(table)?
                .into_iter()
                .map(|f| (f.part.clone(), f))
                .collect(),
        ))
    }

    /// The partition named `part`.
    pub fn get(&self, part: &str) -> Option<&FileEntry> {
        self.0.get(part)
    }

    /// The partitions a question scope reads: its repository's (for a revision too), or every
    /// one for `*`.
    /// A named chunker's scope (`repo~name@rev`, `*~name`) reads that chunker's partitions.
    pub fn of_scope(&self, scope: &Scope) -> Vec<&FileEntry> {
        match scope.over_all() {
            Some(want) => self
                .0
                .iter()
                .filter(|(part, _)| part.parse::<Scope>().is_ok_and(|p| p.chunker() == want))
                .map(|(_, f)| f)
                .collect(),
            None => self.0.get(scope.group()).into_iter().collect(),
        }
    }

    /// The partitions of `scope` under every chunker in `chunkers` (the default's when `None`
    /// is among them), for reading rows by chunk id. Chunkers' partitions are distinct.
    pub fn of_scopes(&self, scope: &Scope, chunkers: &[Option<&str>]) -> Vec<&FileEntry> {
        chunkers
            .iter()
            .flat_map(|c| self.of_scope(&scope.with_chunker(*c)))
            .collect()
    }

    /// The partitions of a batch of `scopes` under every chunker in `chunkers`, each once (the
    /// revisions of a repository read the same ones).
    pub fn of_batch(&self, scopes: &[Scope], chunkers: &[Option<&str>]) -> Vec<&FileEntry> {
        let mut parts: Vec<&FileEntry> = scopes
            .iter()
            .flat_map(|s| self.of_scopes(s, chunkers))
            .collect();
        parts.sort_by(|a, b| a.path.cmp(&b.path));
        parts.dedup_by(|a, b| a.path == b.path);
        parts
    }

    /// The rows of each scope's own partition (a per-scope table's), by scope.
    pub fn read_each<R: serde::de::DeserializeOwned>(
        &self,
        store: &Store,
        scopes: &[Scope],
    ) -> Result<HashMap<Scope, Vec<R>>> {
        scopes
            .iter()
            .map(|s| Ok((s.clone(), self.read(store, s.as_str())?)))
            .collect()
    }

    /// The checksums of [`Parts::of_scopes`], for partition keys.
    pub fn checksums_of(&self, scope: &Scope, chunkers: &[Option<&str>]) -> Vec<&str> {
        self.of_scopes(scope, chunkers)
            .into_iter()
            .map(|f| f.sha256.as_str())
            .collect()
    }

    /// The checksum of partition `part` itself (a per-scope table's, such as `retrievals`), for
    /// partition keys; empty when it has none.
    pub fn own(&self, part: &str) -> Vec<&str> {
        self.0
            .get(part)
            .map(|f| f.sha256.as_str())
            .into_iter()
            .collect()
    }

    /// The checksums of [`Parts::of_scope`], for partition keys.
    pub fn checksums(&self, scope: &Scope) -> Vec<&str> {
        self.of_scope(scope)
            .into_iter()
            .map(|f| f.sha256.as_str())
            .collect()
    }

    /// The rows of partition `part` (none when it is absent).
    pub fn read<R: serde::de::DeserializeOwned>(
        &self,
        store: &Store,
        part: &str,
    ) -> Result<Vec<R>> {
        match self.0.get(part) {
            Some(f) => store.read_rows(f),
            None => Ok(Vec::new()),
        }
    }
}

/// The questions of a run grouped by the scope they search (their `repo`: a repository, or `*`),
/// each group in question-table order. Per-scope stages write one partition per group.
pub fn questions_by_scope(store: &Store) -> Result<BTreeMap<Scope, Vec<QuestionRow>>> {
    let mut out: BTreeMap<Scope, Vec<QuestionRow>> = BTreeMap::new();
    for q in store.read::<QuestionRow>()? {
        out.entry(q.scope.clone()).or_default().push(q);
    }
    Ok(out)
}

/// Every retrieval row, grouped by (variant, question) in rank order.
pub fn pools(rows: &[RetrievalRow]) -> HashMap<(&str, &str), Vec<&RetrievalRow>> {
    let mut pools: HashMap<(&str, &str), Vec<&RetrievalRow>> = HashMap::new();
    for r in rows {
        pools
            .entry((r.variant.as_str(), r.question_id.as_str()))
            .or_default()
            .push(r);
    }
    for p in pools.values_mut() {
        p.sort_by_key(|r| r.rank);
    }
    pools
}
