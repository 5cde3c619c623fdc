//! The `ri-batch` command line: the arguments ([`args`]), the dispatch of each subcommand to the
//! library (here), and what a subcommand does beyond one library call ([`commands`]).

mod args;
mod commands;

pub use args::Cli;
use args::*;
use commands::*;
use ri_batch::{config::Plan, pipeline, sql, Result};
use std::process::ExitCode;

pub fn run(cli: Cli) -> Result<ExitCode> {
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
                plan = ri_batch::pipeline::shard::Shard::parse(&spec)?.plan(&plan);
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
