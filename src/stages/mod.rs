//! The pipeline's stages, one module each, and the toolkit they share: the small [`Stage`] trait,
//! the [`Ctx`] a stage runs with, progress bars, and the per-scope partitioning that lets a
//! nightly rerun recompute only the question scopes whose inputs changed. Stages talk only through
//! artifacts: none imports another.

pub mod chunk;
pub mod embed;
pub mod evaluate;
pub mod extract;
pub mod index;
pub mod pack;
pub mod questions;
pub mod retrieve;
pub mod scan;
mod scoped;

pub use scoped::{per_scope, per_scope_tables, scope_keys};

use crate::artifact::schema::ErrorRow;
use crate::artifact::{StageId, StageWriter, Store};
use crate::config::Plan;
use crate::error::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::IsTerminal;

/// What a stage gets while it runs.
pub struct Ctx<'a> {
    pub plan: &'a Plan,
    pub store: &'a Store,
    pub writer: StageWriter,
    pub progress: &'a Progress,
    /// What [`Stage::probe`] returned for this run (part of the fingerprint).
    pub probe: Value,
    stage: &'static str,
    errors: Vec<ErrorRow>,
    stats: BTreeMap<String, Value>,
}

impl<'a> Ctx<'a> {
    /// The context of one run of `stage`, writing through `writer`.
    pub fn new(
        plan: &'a Plan,
        store: &'a Store,
        writer: StageWriter,
        progress: &'a Progress,
        probe: Value,
        stage: StageId,
    ) -> Ctx<'a> {
        Ctx {
            plan,
            store,
            writer,
            progress,
            probe,
            stage: stage.name(),
            errors: Vec::new(),
            stats: BTreeMap::new(),
        }
    }

    /// What the stage leaves for its commit: its writer, the errors it recorded and its
    /// statistics.
    pub fn finish(self) -> (StageWriter, Vec<ErrorRow>, BTreeMap<String, Value>) {
        (self.writer, self.errors, self.stats)
    }

    /// Records a failure that does not stop the run (a repository, a question, a batch).
    pub fn error(&mut self, repo: Option<&str>, message: impl std::fmt::Display) {
        self.errors.push(ErrorRow {
            repo: repo.map(str::to_string),
            stage: self.stage.to_string(),
            message: message.to_string(),
        });
    }

    /// Records a counter or note in the manifest.
    pub fn stat(&mut self, key: &str, value: impl Into<Value>) {
        self.stats.insert(key.to_string(), value.into());
    }

    /// A progress bar for `len` items of this stage.
    pub fn bar(&self, len: u64, unit: &str) -> ProgressBar {
        self.progress.bar(self.stage, len, unit)
    }
}

/// One pipeline stage: reads artifacts of `inputs`, writes its own through `ctx.writer`.
pub trait Stage: Sync {
    /// Which stage it is.
    fn id(&self) -> StageId;
    /// Stage name, also its directory under the output directory.
    fn name(&self) -> &'static str {
        self.id().name()
    }
    /// Stages whose artifacts this one reads.
    fn inputs(&self) -> &'static [StageId];
    /// The configuration this stage's output depends on.
    fn config(&self, plan: &Plan) -> Value;
    /// Bumped when the stage's output changes for the same inputs and config (an algorithm
    /// change), so that existing artifacts are recomputed rather than reused.
    fn version(&self) -> u32 {
        1
    }
    /// State outside the artifacts that the output depends on (repository heads, a file's hash).
    fn probe(&self, _plan: &Plan) -> Result<Value> {
        Ok(Value::Null)
    }
    /// Whether the stage has anything to do under this plan (else it is passed over, with a reason).
    fn enabled(&self, _plan: &Plan) -> std::result::Result<(), String> {
        Ok(())
    }
    /// Does the work.
    fn run(&self, ctx: &mut Ctx) -> Result<()>;
}

/// How a stage shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// Not at all (`--quiet`).
    Hidden,
    /// A bar redrawn in place (stderr is a terminal).
    Bar,
    /// A plain line every [`LINE_EVERY`] (or `RI_BATCH_PROGRESS_SECONDS`) while the stage runs
    /// (stderr is a file or a pipe: a nightly job's log).
    Lines,
}

/// How often a stage whose stderr is not a terminal prints its progress line, by default.
pub const LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// [`LINE_EVERY`], or the seconds `RI_BATCH_PROGRESS_SECONDS` gives.
fn line_every() -> std::time::Duration {
    std::env::var("RI_BATCH_PROGRESS_SECONDS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(LINE_EVERY, std::time::Duration::from_secs_f64)
}

/// Progress bars: drawn on a terminal, plain lines every few seconds to a file or pipe, nothing
/// when quiet.
pub struct Progress {
    shown: Shown,
}

impl Progress {
    pub fn new(quiet: bool) -> Progress {
        let shown = if quiet {
            Shown::Hidden
        } else if std::io::stderr().is_terminal() {
            Shown::Bar
        } else {
            Shown::Lines
        };
        Progress { shown }
    }

    /// A line with rate and ETA every few seconds while there is something to count, even on
    /// a terminal (for work inside a stage that has its own bar).
    pub fn lines(&self, stage: &str, len: u64, unit: &str) -> ProgressBar {
        match self.shown {
            Shown::Hidden => ProgressBar::hidden(),
            Shown::Lines | Shown::Bar => lines(stage, len, unit),
        }
    }

    /// A bar with rate and ETA.
    pub fn bar(&self, stage: &str, len: u64, unit: &str) -> ProgressBar {
        match self.shown {
            Shown::Hidden => return ProgressBar::hidden(),
            Shown::Lines => return lines(stage, len, unit),
            Shown::Bar => {}
        }
        let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        let template =
            format!("{{prefix:>9}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{per_sec}} ETA {{eta}}");
        pb.set_style(
            ProgressStyle::with_template(&template)
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_prefix(stage.to_string());
        pb
    }
}

/// A hidden bar whose position a thread prints as a line every [`LINE_EVERY`] until the bar is
/// finished or dropped (`   chunk  12/40 repos, 2.1/s, ETA 13s`).
fn lines(stage: &str, len: u64, unit: &str) -> ProgressBar {
    let pb = ProgressBar::hidden();
    pb.set_length(len);
    let weak = pb.downgrade();
    let (stage, unit) = (stage.to_string(), unit.to_string());
    let every = line_every();
    let step = every.min(std::time::Duration::from_millis(100));
    let spawned = std::thread::Builder::new()
        .name(format!("{stage}-progress"))
        .spawn(move || {
            let mut waited = std::time::Duration::ZERO;
            loop {
                std::thread::sleep(step);
                waited += step;
                let Some(pb) = weak.upgrade() else { break };
                if pb.is_finished() {
                    break;
                }
                // Nothing to count (yet): nothing to say.
                if waited >= every && pb.length().unwrap_or(0) > 0 {
                    waited = std::time::Duration::ZERO;
                    let (pos, len) = (pb.position(), pb.length().unwrap_or(0));
                    // The mean rate since the start: indicatif's recent rate falls to 0 between
                    // slow items (minutes-long scopes), and its ETA then runs to months.
                    let secs = pb.elapsed().as_secs_f64();
                    let rate = if secs > 0.0 { pos as f64 / secs } else { 0.0 };
                    let eta = if pos == 0 {
                        "?".to_string()
                    } else {
                        format!("{:.0}s", len.saturating_sub(pos) as f64 / rate)
                    };
                    eprintln!("{stage:>9}  {pos}/{len} {unit}, {rate:.2}/s, ETA {eta}");
                }
            }
        });
    // Without a thread the stage runs the same, silently.
    drop(spawned);
    pb
}
