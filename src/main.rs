//! The `ri-batch` command line: parse, call the library, print errors with their context, exit.
//! The commands are [`cli`].

mod cli;

use clap::Parser;
use std::process::ExitCode;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ri_batch::models::threads::configure();
    match cli::run(cli::Cli::parse()) {
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
