//! The stage runner: run order, the output directory's lock, pull and publish, fingerprints and
//! skipping, commits, and the run's history. The stages and their toolkit are in
//! [`crate::stages`].

pub mod shard;

use crate::artifact::outcomes::StageStatus;
use crate::artifact::remote::Remote;
use crate::artifact::schema::{ErrorRow, Row};
use crate::artifact::{
    discard_journal, hash_json, retire, Manifest, StageId, StageWriter, Store, FORMAT_VERSION,
    RUN_RECORD,
};
use crate::config::Plan;
use crate::error::{Error, IoContext, Result};
use crate::stages::{Ctx, Progress, Stage};
use std::collections::BTreeMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The stage that `id` names.
fn stage_of(id: StageId) -> Box<dyn Stage> {
    use crate::stages::*;
    match id {
        StageId::Scan => Box::new(scan::Scan),
        StageId::Chunk => Box::new(chunk::Chunk),
        StageId::Questions => Box::new(questions::Questions),
        StageId::Embed => Box::new(embed::Embed),
        StageId::Index => Box::new(index::Index),
        StageId::Retrieve => Box::new(retrieve::Retrieve),
        StageId::Pack => Box::new(pack::Pack),
        StageId::Extract => Box::new(extract::Extract),
        StageId::Evaluate => Box::new(evaluate::Evaluate),
    }
}

/// Every stage, in run order ([`StageId::ALL`]).
pub fn all_stages() -> Vec<Box<dyn Stage>> {
    StageId::ALL.into_iter().map(stage_of).collect()
}

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Only these stages (default: all).
    pub stages: Option<Vec<StageId>>,
    /// Redo selected stages even when unchanged.
    pub force: bool,
    /// No progress bars or per-stage lines.
    pub quiet: bool,
    /// Fail at once when another run holds the output directory, instead of waiting for it.
    pub no_wait: bool,
    /// A merge: every shard must have committed its stages (checked once they are pulled, when
    /// the output is on object storage).
    pub merge: bool,
}

/// What happened to one stage.
#[derive(Debug, Clone)]
pub struct StageOutcome {
    pub stage: StageId,
    pub status: StageStatus,
    pub seconds: f64,
    pub rows: BTreeMap<String, u64>,
    pub reused: usize,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub stages: Vec<StageOutcome>,
    /// Rows of the `errors` table after the run (all stages).
    pub errors: usize,
    pub seconds: f64,
}

/// Content identity of a committed stage: the checksums of its files.
pub fn content_hash(m: &Manifest) -> String {
    let mut sums: Vec<(&str, &str, &str)> = m
        .files
        .iter()
        .map(|f| (f.table.as_str(), f.part.as_str(), f.sha256.as_str()))
        .collect();
    sums.sort();
    hash_json(&sums)
}

/// Brings the plan's inputs into place before any stage: the dataset import, when it has one.
pub fn prepare(plan: &Plan, quiet: bool) -> Result<()> {
    let Some(imp) = &plan.import else {
        return Ok(());
    };
    let out = plan.output_dir.join("import");
    if let Some(opts) = &imp.swebench {
        let r = crate::sources::swebench::import(&imp.source, &out, opts)?;
        if !quiet {
            eprintln!(
                "{:>9}  {} questions from {}, {} instances rejected (see {})",
                "import",
                r.written,
                imp.source.display(),
                r.rejected.len(),
                out.join(crate::sources::swebench::REJECTED).display()
            );
        }
        return Ok(());
    }
    let r = crate::sources::import::import(imp.format, &imp.source, &out)?;
    if !quiet {
        let what = if r.written {
            "imported"
        } else {
            "unchanged, kept"
        };
        eprintln!(
            "{:>9}  {what}: {} documents, {} questions from {}",
            "import",
            r.documents,
            r.queries,
            imp.source.display()
        );
    }
    Ok(())
}

/// Seconds since the Unix epoch (0 on a clock before it).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Runs the plan's stages in order, skipping those whose inputs and config are unchanged.
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<RunReport> {
    let started = Instant::now();
    let started_unix = unix_now();
    crate::memory::for_run();
    let _lock = lock_output(plan, opts)?;
    let runner = Runner {
        plan,
        opts,
        remote: pull(plan, opts)?,
        store: Store::new(&plan.output_dir),
        stages: all_stages(),
        progress: Progress::new(opts.quiet),
    };
    runner.prepare()?;
    for problem in plan.model_problems() {
        eprintln!("warning: {problem}");
    }
    let mut outcomes = Vec::new();
    for stage in &runner.stages {
        let selected = opts.stages.as_ref().is_none_or(|s| s.contains(&stage.id()));
        if selected {
            outcomes.push(runner.run_stage(stage.as_ref())?);
        }
    }
    runner.finish(outcomes, started, started_unix)
}

/// Connects to the output's object storage, when it is there, and pulls it into the local
/// mirror; before a merge, checks that every shard committed its stages.
fn pull(plan: &Plan, opts: &RunOptions) -> Result<Option<Remote>> {
    let remote = plan.remote.as_ref().map(Remote::connect).transpose()?;
    if let Some(r) = &remote {
        let t0 = Instant::now();
        let pulled = r.pull(&plan.output_dir)?;
        if !opts.quiet {
            eprintln!(
                "{:>9}  {} into {} in {:.1}s: {pulled}",
                "pull",
                r.url(),
                plan.output_dir.display(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    if opts.merge {
        let count = check_shards(plan)?;
        if !opts.quiet {
            eprintln!("{:>9}  {count} shards", "merge");
        }
    }
    Ok(remote)
}

/// One run in progress: the plan, its output directory and where it is published.
struct Runner<'a> {
    plan: &'a Plan,
    opts: &'a RunOptions,
    remote: Option<Remote>,
    store: Store,
    stages: Vec<Box<dyn Stage>>,
    progress: Progress,
}

impl Runner<'_> {
    /// Publishes `name` (a stage, or the history) as soon as it is committed or found unchanged:
    /// its data objects, then its manifest, then whatever the manifest does not list is deleted.
    fn publish(&self, name: &str) -> Result<()> {
        let Some(r) = &self.remote else {
            return Ok(());
        };
        let t0 = Instant::now();
        let pushed = r.push_stage(&self.plan.output_dir, name)?;
        if !self.opts.quiet && !pushed.is_empty() {
            eprintln!(
                "{name:>9}  published in {:.1}s: {pushed}",
                t0.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }

    /// Before any stage: the import, the run record, the question file read once (so a malformed
    /// line stops the run before scan and chunk spend their time), and the artifacts of stages
    /// this plan disables retired (e.g. `[embed]` removed), so none feeds a later stage.
    fn prepare(&self) -> Result<()> {
        let (plan, quiet) = (self.plan, self.opts.quiet);
        prepare(plan, quiet)?;
        // Which pipeline this directory belongs to, for `ri-batch ask` and `serve`.
        let config = std::fs::canonicalize(&plan.config_path).unwrap_or(plan.config_path.clone());
        let record = serde_json::json!({ "pipeline": config });
        crate::artifact::write_atomic(
            &plan.output_dir.join(RUN_RECORD),
            record.to_string().as_bytes(),
        )?;
        if let Some(q) = &plan.questions {
            crate::evaluation::dataset::load_questions(q)?;
        }
        for stage in &self.stages {
            if let Err(why) = stage.enabled(plan) {
                if self.store.manifest(stage.name())?.is_some() {
                    retire(&self.store, stage.name())?;
                    self.publish(stage.name())?;
                    if !quiet {
                        eprintln!(
                            "{:>9}  not run ({why}): its earlier artifacts are removed",
                            stage.name()
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The content hash of each stage `stage` reads; an enabled input not yet run is an error.
    fn inputs_of(&self, stage: &dyn Stage) -> Result<BTreeMap<String, String>> {
        let mut inputs = BTreeMap::new();
        for input in stage.inputs() {
            if let Some(m) = self.store.manifest(input)? {
                inputs.insert(input.name().to_string(), content_hash(&m));
            } else if self
                .stages
                .iter()
                .any(|s| s.id() == *input && s.enabled(self.plan).is_ok())
            {
                return Err(Error::stage(
                    stage.id(),
                    format!("needs the artifacts of `{input}`: run that stage first"),
                ));
            }
        }
        Ok(inputs)
    }

    /// Runs one stage: passed over when disabled, skipped when its fingerprint and files are
    /// intact (unless forced), else run and committed.
    fn run_stage(&self, stage: &dyn Stage) -> Result<StageOutcome> {
        let (plan, name, quiet) = (self.plan, stage.name(), self.opts.quiet);
        let outcome = |status, seconds, rows, reused| StageOutcome {
            stage: stage.id(),
            status,
            seconds,
            rows,
            reused,
        };
        if let Err(why) = stage.enabled(plan) {
            if !quiet {
                eprintln!("{name:>9}  not run: {why}");
            }
            return Ok(outcome(StageStatus::Disabled(why), 0.0, BTreeMap::new(), 0));
        }
        let t0 = Instant::now();
        let inputs = self.inputs_of(stage)?;
        let config = stage.config(plan);
        let probe = stage.probe(plan)?;
        let fingerprint = hash_json(&(
            name,
            stage.version(),
            &config,
            &inputs,
            &probe,
            FORMAT_VERSION,
        ));
        if let Some(m) = self.intact(name, &fingerprint)? {
            // A killed `--force` run leaves a journal and files beside an intact manifest.
            discard_journal(&self.store, name, &m)?;
            if !quiet {
                eprintln!("{name:>9}  unchanged, skipped");
            }
            self.publish(name)?;
            let seconds = t0.elapsed().as_secs_f64();
            return Ok(outcome(StageStatus::Skipped, seconds, rows_by_table(&m), 0));
        }
        let started_unix = unix_now();
        // --force redoes the work: nothing from an earlier run or journal is reused.
        let writer = StageWriter::begin(&self.store, name, &fingerprint, !self.opts.force)?;
        let mut ctx = Ctx::new(plan, &self.store, writer, &self.progress, probe, stage.id());
        stage.run(&mut ctx)?;
        // What the stage ran with, for `compare` and the run history.
        ctx.stat("config", config.clone());
        if let Some(mb) = crate::memory::peak_mb() {
            ctx.stat("peak_rss_mb", mb);
        }
        let (mut writer, errors, stats) = ctx.finish();
        writer.write(name, "", &errors)?;
        let reused = writer.reused();
        let manifest = writer.commit(Manifest {
            stage: name.into(),
            fingerprint: String::new(),
            config_hash: hash_json(&config),
            inputs,
            tool_version: env!("CARGO_PKG_VERSION").into(),
            format_version: FORMAT_VERSION,
            started_unix,
            seconds: t0.elapsed().as_secs_f64(),
            files: Vec::new(),
            stats,
        })?;
        crate::memory::release_free();
        self.publish(name)?;
        let rows = rows_by_table(&manifest);
        if !quiet {
            let shown: Vec<String> = rows.iter().map(|(t, n)| format!("{t} {n}")).collect();
            let reuse = if reused > 0 {
                format!(", {reused} partitions reused")
            } else {
                String::new()
            };
            eprintln!(
                "{name:>9}  ran in {:.1}s: {}{reuse}",
                t0.elapsed().as_secs_f64(),
                shown.join(", ")
            );
        }
        let seconds = t0.elapsed().as_secs_f64();
        Ok(outcome(StageStatus::Ran, seconds, rows, reused))
    }

    /// The stage's committed manifest when it has `fingerprint` and every file it lists is there
    /// at its size, unless the run is forced.
    fn intact(&self, name: &str, fingerprint: &str) -> Result<Option<Manifest>> {
        if self.opts.force {
            return Ok(None);
        }
        let store = &self.store;
        Ok(store.manifest(name)?.filter(|m| {
            m.fingerprint == fingerprint
                && m.files.iter().all(|f| {
                    store
                        .path_of(f)
                        .and_then(|p| std::fs::metadata(&p).at(&p))
                        .is_ok_and(|md| md.len() == f.bytes)
                })
        }))
    }

    /// After the stages: the run's figures join the history (a no-change rerun too: the history
    /// says it ran), the run record is published, and the errors are counted.
    fn finish(
        &self,
        outcomes: Vec<StageOutcome>,
        started: Instant,
        started_unix: u64,
    ) -> Result<RunReport> {
        let ran = outcomes
            .iter()
            .filter(|o| o.status == StageStatus::Ran)
            .count() as u32;
        let facts = crate::artifact::history::RunFacts {
            started_unix,
            seconds: started.elapsed().as_secs_f64(),
            stages_ran: ran,
        };
        let whole = self.opts.stages.is_none();
        if whole && crate::artifact::history::append(&self.store, &facts)?.is_some() {
            self.publish(crate::artifact::history::DIR)?;
        }
        if let Some(r) = &self.remote {
            r.push_file(&self.plan.output_dir, RUN_RECORD)?;
        }
        let errors = self
            .store
            .files_of(ErrorRow::TABLE)?
            .iter()
            .map(|f| f.rows as usize)
            .sum();
        Ok(RunReport {
            stages: outcomes,
            errors,
            seconds: started.elapsed().as_secs_f64(),
        })
    }
}

/// Publishes files of the output directory that no manifest lists (the report), when the output
/// is on object storage.
pub fn publish_files(plan: &Plan, rels: &[&str]) -> Result<()> {
    if let Some(url) = &plan.remote {
        let r = Remote::connect(url)?;
        for rel in rels {
            r.push_file(&plan.output_dir, rel)?;
        }
    }
    Ok(())
}

/// Before a merge: checks that every shard has committed each stage a shard runs under `plan`
/// (the error names the shard and the stage); returns the shard count.
pub fn check_shards(plan: &Plan) -> Result<u32> {
    let as_shard = crate::pipeline::shard::Shard { index: 0, count: 1 }.plan(plan);
    let stages: Vec<&str> = all_stages()
        .iter()
        .filter(|s| s.enabled(&as_shard).is_ok())
        .map(|s| s.name())
        .collect();
    crate::pipeline::shard::check_complete(plan, &stages)
}

/// Takes the advisory lock of the output directory (`<output_dir>/.lock`), held until the
/// returned file is dropped (or the process ends, however it ends). A second run on the same
/// directory waits for the first, saying so, or fails at once with `no_wait`.
pub fn lock_output(plan: &Plan, opts: &RunOptions) -> Result<std::fs::File> {
    let dir = &plan.output_dir;
    std::fs::create_dir_all(dir).at(dir)?;
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .at(&path)?;
    match file.try_lock() {
        Ok(()) => return Ok(file),
        Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        Err(std::fs::TryLockError::WouldBlock) => {}
    }
    if opts.no_wait {
        return Err(Error::Invalid(format!(
            "{}: another ri-batch run is using this output directory (lock {}); wait for it, or run without --no-wait to wait",
            dir.display(),
            path.display()
        )));
    }
    eprintln!(
        "waiting: another ri-batch run is using {} (lock {})",
        dir.display(),
        path.display()
    );
    file.lock().at(&path)?;
    Ok(file)
}

fn rows_by_table(m: &Manifest) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    for f in &m.files {
        *rows.entry(f.table.clone()).or_insert(0) += f.rows;
    }
    rows
}
