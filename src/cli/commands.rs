//! What each subcommand does beyond one library call: read a statement, print to a pipe that may
//! close, export, compare, check and import datasets, ask, and finish a run with its summary.

use super::args::{DatasetImport, ImportFormat};
use ri_batch::artifact::outcomes::StageStatus;
use ri_batch::{config::Plan, pipeline, sql, Result};
use std::path::PathBuf;
use std::process::ExitCode;

/// A statement from a file (read as every input file is: [`ri_batch::error::read_text`]), or
/// from standard input (`None`).
pub(super) fn read_query(file: Option<&std::path::Path>) -> Result<String> {
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
pub(super) fn emit(text: &str) -> Result<()> {
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
pub(super) fn sql_command(
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
pub(super) fn export_trec(
    run: PathBuf,
    out: &std::path::Path,
    variant: &str,
    level: ri_batch::report::trec::Level,
    split: Option<&str>,
) -> Result<ExitCode> {
    let dir = if run.is_file() {
        Plan::load(&run)?.output_dir
    } else {
        run
    };
    let store = ri_batch::artifact::Store::new(&dir);
    let e = ri_batch::report::trec::export(&store, out, variant, level, split)?;
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
pub(super) fn compare(
    a: &str,
    b: &str,
    json: bool,
    html: Option<&std::path::Path>,
) -> Result<ExitCode> {
    use ri_batch::report::compare;
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
pub(super) fn dataset_check(path: &std::path::Path) -> Result<ExitCode> {
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
pub(super) fn dataset_import(args: DatasetImport) -> Result<ExitCode> {
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
        let r = ri_batch::report::trec::import(&source, &qrels, &repo, &split, &out)?;
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
        let opts = ri_batch::sources::swebench::Options {
            repos,
            split,
            hints,
        };
        let r = ri_batch::sources::swebench::import(&source, &out, &opts)?;
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
        ImportFormat::Beir => ri_batch::sources::import::Format::Beir,
        _ => ri_batch::sources::import::Format::Cosqa,
    };
    let r = ri_batch::sources::import::import(format, &source, &out)?;
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
pub(super) fn ask(
    run: &std::path::Path,
    question: &str,
    repo: Option<&str>,
    budget: Option<ri_batch::config::Budget>,
    variant: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let r = ri_batch::serve::Run::open(run)?;
    let a = r.answer(question, repo, budget, variant)?;
    let answered = a.outcome == ri_batch::artifact::outcomes::Answer::Answered;
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
pub(super) fn finish_run(
    plan: &Plan,
    opts: &pipeline::RunOptions,
    show_holdout: bool,
) -> Result<ExitCode> {
    let report = pipeline::run(plan, opts)?;
    let store = ri_batch::artifact::Store::new(&plan.output_dir);
    print!(
        "{}",
        ri_batch::report::summary::text(&store, &plan.evaluate.held_out, show_holdout)?
    );
    if let Some(since) = ri_batch::report::compare::since_last_run(&store)? {
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
    let unmet = ri_batch::report::summary::unmet(plan, &store)?;
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
