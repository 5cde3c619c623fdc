//! Every artifact table's row type and Arrow schema, in one place, with the shared column names
//! (repo, path, start_line, end_line, chunk_id, question_id, variant, split).

use crate::artifact::outcomes::{Outcome, PackedKind, Reason, VariantStatus};
use crate::error::{Error, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, FieldRef};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::artifact::columns::*;
pub use crate::artifact::scope::Scope;
pub use crate::artifact::table::Table;
use std::sync::Arc;

/// A row of an artifact table.
pub trait Row: Serialize + DeserializeOwned + Send + Sync {
    /// The table the rows are written to.
    const TABLE: Table;
    /// The Arrow fields, in column order.
    fn fields() -> Vec<FieldRef>;
    /// The Arrow schema of those fields.
    fn schema() -> arrow::datatypes::SchemaRef {
        Arc::new(arrow::datatypes::Schema::new(Self::fields()))
    }
}

/// Rows → one record batch.
pub fn to_batch<R: Row>(rows: &[R]) -> Result<RecordBatch> {
    to_batch_with(&R::fields(), rows)
}

/// Rows → one record batch with explicit fields (tables whose width depends on the run).
pub fn to_batch_with<R: Serialize>(fields: &[FieldRef], rows: &[R]) -> Result<RecordBatch> {
    serde_arrow::to_record_batch(fields, &rows)
        .map_err(|e| Error::Invalid(format!("building Arrow batch: {e}")))
}

/// One record batch → rows.
pub fn from_batch<R: DeserializeOwned>(batch: &RecordBatch) -> Result<Vec<R>> {
    serde_arrow::from_record_batch(batch)
        .map_err(|e| Error::Invalid(format!("reading Arrow batch: {e}")))
}

/// `files`: one row per file at a commit (scan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRow {
    pub repo: String,
    pub commit: String,
    pub path: String,
    pub blob_id: String,
    pub bytes: u64,
    pub language: String,
    pub text: String,
}

impl Row for FileRow {
    const TABLE: Table = Table::Files;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("repo"),
            utf8("commit"),
            utf8("path"),
            utf8("blob_id"),
            u64f("bytes"),
            utf8("language"),
            utf8("text"),
        ]
    }
}

/// `skipped`: a file the scan left out, and why (binary, too_large, invalid_utf8, sensitive_path,
/// sensitive_content, excluded). Sensitive files keep their path only; never their content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkippedRow {
    pub repo: String,
    pub path: String,
    pub reason: String,
    pub bytes: u64,
}

impl Row for SkippedRow {
    const TABLE: Table = Table::Skipped;
    fn fields() -> Vec<FieldRef> {
        vec![utf8("repo"), utf8("path"), utf8("reason"), u64f("bytes")]
    }
}

/// `commits`: a commit reachable from a git repository's pinned rev (newest first, at most
/// `[scan] max_commits`); the author's e-mail only with `[scan] commit_emails = true`. A message
/// the sensitivity filter flags is left out whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitRow {
    pub repo: String,
    pub commit: String,
    /// Commit time, seconds since the Unix epoch.
    pub time: i64,
    pub subject: String,
    pub body: String,
    pub author_email: Option<String>,
}

impl Row for CommitRow {
    const TABLE: Table = Table::Commits;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("repo"),
            utf8("commit"),
            f("time", DataType::Int64, false),
            utf8("subject"),
            utf8("body"),
            utf8_null("author_email"),
        ]
    }
}

/// `trees`: one row per kept file of a revision, in the revision's listing order, one partition per
/// repository (scan): what each revision holds, by blob. A file's text is in `files` once per
/// (path, blob), however many revisions hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeRow {
    pub repo: String,
    pub scope: Scope,
    pub commit: String,
    pub path: String,
    pub blob_id: String,
}

impl Row for TreeRow {
    const TABLE: Table = Table::Trees;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("repo"),
            utf8("scope"),
            utf8("commit"),
            utf8("path"),
            utf8("blob_id"),
        ]
    }
}

/// `revisions`: one row per scanned revision (scan): the scope its questions search, the rev as
/// written, the commit it resolved to, and its kept files and their bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RevisionRow {
    pub repo: String,
    pub scope: Scope,
    pub rev: String,
    pub commit: String,
    pub files: u32,
    pub bytes: u64,
}

impl Row for RevisionRow {
    const TABLE: Table = Table::Revisions;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("repo"),
            utf8("scope"),
            utf8("rev"),
            utf8("commit"),
            u32f("files"),
            u64f("bytes"),
        ]
    }
}

/// `scope_members` (chunk): for each revision of a repository read at several (one row each, one
/// partition per repository), which rows of the repository's `chunks` partition (and of its
/// `files` partition) it holds, in the order a build of that revision alone would number them. Its BM25 statistics, dense
/// search and packing are computed over those rows only, so they equal a run of that revision
/// alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MembersRow {
    pub repo: String,
    pub scope: Scope,
    pub chunks: Vec<u32>,
    pub files: Vec<u32>,
}

impl Row for MembersRow {
    const TABLE: Table = Table::ScopeMembers;
    fn fields() -> Vec<FieldRef> {
        let list = |n: &str| {
            f(
                n,
                DataType::List(Arc::new(Field::new("item", DataType::UInt32, false))),
                false,
            )
        };
        vec![utf8("repo"), utf8("scope"), list("chunks"), list("files")]
    }
}

/// `bm25_file_docs`: each file of a scope's whole-file BM25 index (path and text, analysed as
/// one document), in document order; written when a variant ranks files `whole`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileDocRow {
    pub scope: Scope,
    pub repo: String,
    pub path: String,
    pub length: u32,
}

impl FileDocRow {
    /// The whole-file index (CSR postings, Arrow IPC), as `bm25_index` is for chunks.
    pub const INDEX: Table = Table::Bm25FileIndex;
    /// Its terms and document frequencies, as `bm25_terms` is for chunks.
    pub const TERMS: Table = Table::Bm25FileTerms;
}

impl Row for FileDocRow {
    const TABLE: Table = Table::Bm25FileDocs;
    fn fields() -> Vec<FieldRef> {
        vec![utf8("scope"), utf8("repo"), utf8("path"), u32f("length")]
    }
}

/// `file_retrievals`: a variant's ranking of files for one question (retrieve), for the
/// variants that rank files otherwise than by their best chunk (`files = "whole"` or `"fused"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileRetrievalRow {
    pub variant: String,
    pub question_id: String,
    pub rank: u32,
    pub repo: String,
    pub path: String,
    pub score: f64,
}

impl Row for FileRetrievalRow {
    const TABLE: Table = Table::FileRetrievals;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("variant"),
            utf8("question_id"),
            u32f("rank"),
            utf8("repo"),
            utf8("path"),
            f64f("score"),
        ]
    }
}

/// `errors`: a repository or step that failed; the run went on without it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRow {
    pub repo: Option<String>,
    pub stage: String,
    pub message: String,
}

impl Row for ErrorRow {
    const TABLE: Table = Table::Errors;
    fn fields() -> Vec<FieldRef> {
        vec![utf8_null("repo"), utf8("stage"), utf8("message")]
    }
}

/// `chunks`: a line-addressed piece of a file (chunk).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkRow {
    pub chunk_id: String,
    pub repo: String,
    pub commit: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    /// Markdown heading path, or for a chunk cut by syntax the definitions enclosing it
    /// (`Store > flush`); ` > `-separated; empty otherwise.
    pub heading: String,
    /// `markdown`, `code`, `text`, or `syntax` (code cut along its syntax tree).
    pub kind: String,
    pub tokens: u32,
    pub text: String,
    /// For chunks whose text starts with an overlap from the previous chunk joined by an added
    /// `\n` (the `intellirag` chunker): the byte offset in `text` just after that `\n`, and
    /// the file line of that byte. 0 and 0 for line-addressed chunks, whose text is exactly
    /// lines `start_line..=end_line`.
    pub join_at: u32,
    pub join_line: u32,
}

impl ChunkRow {
    /// The text a chunk is indexed and embedded by: with `with_path`, its path, heading path and
    /// text; else its text alone.
    pub fn indexed_text(&self, with_path: bool) -> String {
        indexed_text(&self.path, &self.heading, &self.text, with_path)
    }
}

/// See [`ChunkRow::indexed_text`].
pub fn indexed_text(path: &str, heading: &str, text: &str, with_path: bool) -> String {
    if with_path {
        format!("{path}\n{heading}\n{text}")
    } else {
        text.to_string()
    }
}

impl Row for ChunkRow {
    const TABLE: Table = Table::Chunks;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("chunk_id"),
            utf8("repo"),
            utf8("commit"),
            utf8("path"),
            u32f("start_line"),
            u32f("end_line"),
            utf8("heading"),
            utf8("kind"),
            u32f("tokens"),
            utf8("text"),
            u32f("join_at"),
            u32f("join_line"),
        ]
    }
}

/// One evidence anchor of a question: `quote` must occur in `path` of the question's repo (at its
/// revision). With `start_line`/`end_line` (1-based, inclusive) the anchor is those lines, and
/// `quote` is their text: the anchor counts as found when the lines are inside what was returned,
/// not wherever the same words occur.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub path: String,
    pub quote: String,
    #[serde(default)]
    pub start_line: Option<u32>,
    #[serde(default)]
    pub end_line: Option<u32>,
}

impl Evidence {
    /// The anchored lines, when the anchor has them.
    pub fn lines(&self) -> Option<(u32, u32)> {
        Some((self.start_line?, self.end_line?))
    }
}

/// `questions`: the question set, as loaded and checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionRow {
    pub question_id: String,
    /// The scope the question searches (column `repo`): a repository, one revision of it
    /// ([`Scope::at`]), or `*`.
    #[serde(rename = "repo")]
    pub scope: Scope,
    pub split: String,
    pub answerable: bool,
    pub question: String,
    pub evidence: Vec<Evidence>,
    /// Gold documents (paths) with relevance grades, for ranking metrics; may be empty.
    pub gold_paths: Vec<String>,
    pub gold_grades: Vec<u32>,
    /// The revision the question was asked at, as the question file gives it (none: the
    /// repository's own `rev`).
    pub rev: Option<String>,
}

impl Row for QuestionRow {
    const TABLE: Table = Table::Questions;
    fn fields() -> Vec<FieldRef> {
        let ev = DataType::Struct(
            vec![
                Field::new("path", DataType::Utf8, false),
                Field::new("quote", DataType::Utf8, false),
                Field::new("start_line", DataType::UInt32, true),
                Field::new("end_line", DataType::UInt32, true),
            ]
            .into(),
        );
        vec![
            utf8("question_id"),
            utf8("repo"),
            utf8("split"),
            f("answerable", DataType::Boolean, false),
            utf8("question"),
            f(
                "evidence",
                DataType::List(Arc::new(Field::new("item", ev, false))),
                false,
            ),
            list_utf8("gold_paths"),
            f(
                "gold_grades",
                DataType::List(Arc::new(Field::new("item", DataType::UInt32, false))),
                false,
            ),
            utf8_null("rev"),
        ]
    }
}

/// `bm25_terms`: document frequency of each term in a scope (a repository, or `*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TermRow {
    pub scope: Scope,
    pub term: String,
    pub df: u32,
}

impl Row for TermRow {
    const TABLE: Table = Table::Bm25Terms;
    fn fields() -> Vec<FieldRef> {
        vec![utf8("scope"), utf8("term"), u32f("df")]
    }
}

/// `bm25_docs`: length (in terms) of each chunk in a scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocRow {
    pub scope: Scope,
    pub chunk_id: String,
    pub length: u32,
}

impl Row for DocRow {
    const TABLE: Table = Table::Bm25Docs;
    fn fields() -> Vec<FieldRef> {
        vec![utf8("scope"), utf8("chunk_id"), u32f("length")]
    }
}

/// `embeddings` / `question_embeddings` / `unit_embeddings`: one vector per (model, text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRow {
    /// chunk_id for chunks, question_id for questions, [`EmbeddingRow::unit_id`] for units.
    pub id: String,
    pub text_hash: String,
    pub model: String,
    pub vector: Vec<f32>,
}

impl EmbeddingRow {
    /// Chunk vectors, one partition per chunk partition.
    pub const CHUNKS: Table = Table::Embeddings;
    /// Question vectors (query-side, with the model's query prefix).
    pub const QUESTIONS: Table = Table::QuestionEmbeddings;
    /// Vectors of every chunk's units as the compact packer cuts them, written when a variant
    /// sets `unit_dense`; one partition per chunk partition.
    pub const UNITS: Table = Table::UnitEmbeddings;

    /// The id of unit `pos` (0-based, as [`crate::text::units::split_units`] cuts) of a chunk.
    pub fn unit_id(chunk_id: &str, pos: usize) -> String {
        format!("{chunk_id}#{pos}")
    }
}

/// Fields of an embedding table whose vectors have `dims` entries.
pub fn embedding_fields(dims: usize) -> Vec<FieldRef> {
    vec![
        utf8("id"),
        utf8("text_hash"),
        utf8("model"),
        f(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, false)),
                dims as i32,
            ),
            false,
        ),
    ]
}

/// `retrievals`: the pool of one variant for one question, in rank order (retrieve).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalRow {
    pub variant: String,
    pub question_id: String,
    pub rank: u32,
    pub chunk_id: String,
    pub score: f64,
    pub bm25_rank: Option<u32>,
    pub dense_rank: Option<u32>,
}

impl Row for RetrievalRow {
    const TABLE: Table = Table::Retrievals;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("variant"),
            utf8("question_id"),
            u32f("rank"),
            utf8("chunk_id"),
            f64f("score"),
            f("bm25_rank", DataType::UInt32, true),
            f("dense_rank", DataType::UInt32, true),
        ]
    }
}

/// `packs`: what the model would see, unit by unit, in reading order (pack).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackRow {
    pub variant: String,
    pub question_id: String,
    pub order: u32,
    pub chunk_id: String,
    pub repo: String,
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub tokens: u32,
    /// `chunk` (whole chunk) or `unit` (a sentence, list item, table row or code line of it).
    pub unit: PackedKind,
    pub text: String,
    /// The commit the packed file version was first scanned at (its chunk's `commit`): where
    /// its source lines are read again.
    pub commit: String,
}

impl Row for PackRow {
    const TABLE: Table = Table::Packs;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("variant"),
            utf8("question_id"),
            u32f("order"),
            utf8("chunk_id"),
            utf8("repo"),
            utf8("path"),
            u32f("start_line"),
            u32f("end_line"),
            u32f("tokens"),
            utf8("unit"),
            utf8("text"),
            utf8("commit"),
        ]
    }
}

/// `extracts`: the selector's reply, the contract's verdict and the rendered answer (extract).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractRow {
    pub variant: String,
    pub question_id: String,
    pub selector: String,
    pub raw_reply: String,
    pub accepted_ids: Vec<String>,
    pub outcome: Outcome,
    pub reason: Reason,
    pub rendered: String,
    /// The pack's support for the question (see [`crate::answer::selectors::support`]), whatever the
    /// selector: refusing below a threshold of it gives the refusal trade-off curve in SQL.
    pub support: f64,
    /// The `reader` selector's probability of refusing (null for other selectors): refusing at
    /// or above a threshold of it gives the reader's refusal curve in SQL.
    pub refusal_prob: Option<f64>,
    /// The `reader` selector's probability of naming each label E1..En first when it does not
    /// refuse (null for other selectors): other selection rules, in SQL.
    pub id_probs: Option<Vec<f64>>,
}

impl Row for ExtractRow {
    const TABLE: Table = Table::Extracts;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("variant"),
            utf8("question_id"),
            utf8("selector"),
            utf8("raw_reply"),
            list_utf8("accepted_ids"),
            utf8("outcome"),
            utf8("reason"),
            utf8("rendered"),
            f64f("support"),
            f("refusal_prob", DataType::Float64, true),
            list_f64_null("id_probs"),
        ]
    }
}

/// `evaluation`: per variant × question metrics (evaluate). Recalls are null for unanswerable
/// questions; ranking metrics are null when the question has no gold documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationRow {
    pub variant: String,
    pub question_id: String,
    /// The question's scope ([`QuestionRow::scope`]).
    pub repo: Scope,
    pub split: String,
    pub answerable: bool,
    pub pool_recall: Option<f64>,
    pub packed_recall: Option<f64>,
    pub tokens_used: u32,
    pub mrr10: Option<f64>,
    pub ndcg10: Option<f64>,
    pub recall10: Option<f64>,
    pub recall100: Option<f64>,
    pub outcome: Option<Outcome>,
    /// File-level accuracy at 1, 5 and 10: 1 when every gold document is among the first k
    /// ranked files, else 0 (null without gold documents).
    pub acc1: Option<f64>,
    pub acc5: Option<f64>,
    pub acc10: Option<f64>,
}

impl Row for EvaluationRow {
    const TABLE: Table = Table::Evaluation;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("variant"),
            utf8("question_id"),
            utf8("repo"),
            utf8("split"),
            f("answerable", DataType::Boolean, false),
            f64_null("pool_recall"),
            f64_null("packed_recall"),
            u32f("tokens_used"),
            f64_null("mrr10"),
            f64_null("ndcg10"),
            f64_null("recall10"),
            f64_null("recall100"),
            utf8_null("outcome"),
            f64_null("acc1"),
            f64_null("acc5"),
            f64_null("acc10"),
        ]
    }
}

/// `summary`: per variant × split means (evaluate); `status` says `ok` or why the variant did not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    pub variant: String,
    pub split: String,
    pub retriever: String,
    pub packer: String,
    pub budget: u32,
    pub status: VariantStatus,
    pub questions: u32,
    pub answerable: u32,
    pub pool_recall: Option<f64>,
    pub packed_recall: Option<f64>,
    pub mean_tokens: Option<f64>,
    pub mrr10: Option<f64>,
    pub ndcg10: Option<f64>,
    pub recall10: Option<f64>,
    pub recall100: Option<f64>,
    /// Extract outcome counts (null when no extract ran).
    pub full: Option<u32>,
    pub partial: Option<u32>,
    pub irrelevant: Option<u32>,
    pub false_refusal: Option<u32>,
    pub correct_refusal: Option<u32>,
    pub false_selection: Option<u32>,
    pub contract_refusals: Option<u32>,
    pub acc1: Option<f64>,
    pub acc5: Option<f64>,
    pub acc10: Option<f64>,
}

impl Row for SummaryRow {
    const TABLE: Table = Table::Summary;
    fn fields() -> Vec<FieldRef> {
        let u32n = |n: &str| f(n, DataType::UInt32, true);
        vec![
            utf8("variant"),
            utf8("split"),
            utf8("retriever"),
            utf8("packer"),
            u32f("budget"),
            utf8("status"),
            u32f("questions"),
            u32f("answerable"),
            f64_null("pool_recall"),
            f64_null("packed_recall"),
            f64_null("mean_tokens"),
            f64_null("mrr10"),
            f64_null("ndcg10"),
            f64_null("recall10"),
            f64_null("recall100"),
            u32n("full"),
            u32n("partial"),
            u32n("irrelevant"),
            u32n("false_refusal"),
            u32n("correct_refusal"),
            u32n("false_selection"),
            u32n("contract_refusals"),
            f64_null("acc1"),
            f64_null("acc5"),
            f64_null("acc10"),
        ]
    }
}

/// `comparisons`: each variant against the baseline, per split and metric: paired bootstrap 95%
/// interval of the mean difference, wins / losses / ties per question, and p-values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub variant: String,
    pub baseline: String,
    pub split: String,
    pub metric: String,
    pub n: u32,
    pub mean: f64,
    pub baseline_mean: f64,
    pub diff: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    pub wins: u32,
    pub losses: u32,
    pub ties: u32,
    /// Two-sided paired randomization test of the difference (as many rounds as bootstrap
    /// resamples; NaN in a run from before p-values).
    #[serde(default = "no_p")]
    pub p_value: f64,
    /// `p_value` adjusted by Holm–Bonferroni over every variant compared on this split and
    /// metric.
    #[serde(default = "no_p")]
    pub p_holm: f64,
}

fn no_p() -> f64 {
    f64::NAN
}

impl Row for ComparisonRow {
    const TABLE: Table = Table::Comparisons;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("variant"),
            utf8("baseline"),
            utf8("split"),
            utf8("metric"),
            u32f("n"),
            f64f("mean"),
            f64f("baseline_mean"),
            f64f("diff"),
            f64f("ci_low"),
            f64f("ci_high"),
            u32f("wins"),
            u32f("losses"),
            u32f("ties"),
            f64f("p_value"),
            f64f("p_holm"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_arrow() {
        let rows = vec![QuestionRow {
            question_id: "q1".into(),
            scope: Scope::repo("ms"),
            split: "dev".into(),
            answerable: true,
            question: "how?".into(),
            evidence: vec![Evidence {
                path: "readme.md".into(),
                quote: "ms('2 days')".into(),
                start_line: Some(3),
                end_line: None,
            }],
            gold_paths: vec![],
            gold_grades: vec![],
            rev: Some("v1".into()),
        }];
        let batch = to_batch(&rows).unwrap();
        assert_eq!(batch.schema().fields().len(), QuestionRow::fields().len());
        let back: Vec<QuestionRow> = from_batch(&batch).unwrap();
        assert_eq!(back, rows);

        let e = vec![EmbeddingRow {
            id: "c".into(),
            text_hash: "h".into(),
            model: "m".into(),
            vector: vec![0.5, -1.0, 2.0],
        }];
        let batch = to_batch_with(&embedding_fields(3), &e).unwrap();
        assert!(matches!(
            batch.schema().field(3).data_type(),
            DataType::FixedSizeList(_, 3)
        ));
        let back: Vec<EmbeddingRow> = from_batch(&batch).unwrap();
        assert_eq!(back, e);
    }
}
