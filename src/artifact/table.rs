//! Every artifact table, by name: the one list, each a directory of a stage's output and an SQL
//! table of the same name. Row types name theirs ([`crate::artifact::schema::Row::TABLE`]).

named! {
    /// An artifact table, by name: the one list of tables. Each is a directory of a stage's
    /// output and an SQL table of the same name.
    pub enum Table {
        /// One row per file at a commit (scan).
        Files = "files",
        /// Files scan left out, with the reason.
        Skipped = "skipped",
        /// One row per (repository, revision): the commit it resolved to.
        Commits = "commits",
        /// Which blob each path has at each revision.
        Trees = "trees",
        /// The revisions a many-revision repository was scanned at.
        Revisions = "revisions",
        /// Which chunks and files make up each revision's scope.
        ScopeMembers = "scope_members",
        /// Chunks cut from files.
        Chunks = "chunks",
        /// The question set.
        Questions = "questions",
        /// Chunk vectors, one partition per chunk partition.
        Embeddings = "embeddings",
        /// Question vectors (query side, with the model's query prefix).
        QuestionEmbeddings = "question_embeddings",
        /// Vectors of every chunk's units as the compact packer cuts them.
        UnitEmbeddings = "unit_embeddings",
        /// BM25 terms and document frequencies of the chunk index.
        Bm25Terms = "bm25_terms",
        /// BM25 documents (chunks) and their lengths.
        Bm25Docs = "bm25_docs",
        /// The chunk index's CSR postings (Arrow IPC).
        Bm25Index = "bm25_index",
        /// BM25 documents of the whole-file index.
        Bm25FileDocs = "bm25_file_docs",
        /// Terms of the whole-file index.
        Bm25FileTerms = "bm25_file_terms",
        /// The whole-file index's CSR postings (Arrow IPC).
        Bm25FileIndex = "bm25_file_index",
        /// Ranked chunks per (question, variant).
        Retrievals = "retrievals",
        /// Ranked files per (question, variant).
        FileRetrievals = "file_retrievals",
        /// Packed contexts per (question, variant).
        Packs = "packs",
        /// Selected and rendered evidence per (question, variant).
        Extracts = "extracts",
        /// Per-question metrics.
        Evaluation = "evaluation",
        /// Per (variant, split) means.
        Summary = "summary",
        /// Paired comparisons between variants.
        Comparisons = "comparisons",
        /// Errors recorded by any stage; the run went on.
        Errors = "errors",
        /// Per-run summary rows (`summary` plus `run_id`).
        History = "history",
        /// Per-run, per-question metrics (`evaluation` plus `run_id`).
        HistoryQuestions = "history_questions",
        /// One row per run: when, with what, over which revisions.
        HistoryRuns = "history_runs",
    }
}

impl Table {
    /// Whether the table's files are written with zstd rather than Snappy: the large tables of
    /// repository text, chunks and index statistics, written once per repository. The others
    /// are small and one per question scope, or vectors (which compress little), and the zstd
    /// codec's set-up per column chunk costs more than it saves there (docs/revisions.md,
    /// "Output size").
    pub fn zstd(self) -> bool {
        matches!(
            self,
            Table::Files
                | Table::Trees
                | Table::ScopeMembers
                | Table::Chunks
                | Table::Bm25Terms
                | Table::Bm25Docs
                | Table::Bm25FileDocs
                | Table::Bm25FileTerms
        )
    }
}
