//! The stage runner: the small [`Stage`] trait, run order, fingerprints and skipping, per-stage
//! error collection and progress bars.

use crate::artifact::remote::Remote;
use crate::artifact::{
    discard_journal, hash_json, retire, Manifest, StageId, StageWriter, Store, FORMAT_VERSION,
};
use crate::config::Plan;
use crate::error::{Error, IoContext, Result};
use crate::schema::ErrorRow;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The record of which pipeline wrote an output directory (`<output_dir>/run.json`).
pub const RUN_RECORD: &str = "run.json";

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

impl Ctx<'_> {
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
    pub stage: String,
    /// `ran`, `skipped` (unchanged) or `disabled: <why>`.
    pub status: String,
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

/// Progress bars, hidden when quiet or when stderr is not a terminal.
pub struct Progress {
    hidden: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Progress {
        Progress {
            hidden: quiet || !std::io::stderr().is_terminal(),
        }
    }

    /// A bar with rate and ETA.
    pub fn bar(&self, stage: &str, len: u64, unit: &str) -> ProgressBar {
        if self.hidden {
            return ProgressBar::hidden();
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
        let r = crate::swebench::import(&imp.source, &out, opts)?;
        if !quiet {
            eprintln!(
                "{:>9}  {} questions from {}, {} instances rejected (see {})",
                "import",
                r.written,
                imp.source.display(),
                r.rejected.len(),
                out.join(crate::swebench::REJECTED).display()
            );
        }
        return Ok(());
    }
    let r = crate::import::import(imp.format, &imp.source, &out)?;
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
    let run_started_unix = unix_now();
    fix_mmap_threshold();
    let _lock = lock_output(plan, opts)?;
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
    // Each stage goes to the bucket as soon as it is committed or found unchanged: its data
    // objects, then its manifest, then whatever the manifest does not list is deleted.
    let publish = |name: &str| -> Result<()> {
        let Some(r) = &remote else { return Ok(()) };
        let t0 = Instant::now();
        let pushed = r.push_stage(&plan.output_dir, name)?;
        if !opts.quiet && !pushed.is_empty() {
            eprintln!(
                "{name:>9}  published in {:.1}s: {pushed}",
                t0.elapsed().as_secs_f64()
            );
        }
        Ok(())
    };
    prepare(plan, opts.quiet)?;
    // Which pipeline this directory belongs to, for `ri-batch ask` and `serve`.
    let config = std::fs::canonicalize(&plan.config_path).unwrap_or(plan.config_path.clone());
    let record = serde_json::json!({ "pipeline": config });
    crate::artifact::write_atomic(
        &plan.output_dir.join(RUN_RECORD),
        record.to_string().as_bytes(),
    )?;
    let store = Store::new(&plan.output_dir);
    let stages = all_stages();
    // The question file is read before any stage, so a malformed line stops the run before
    // scan and chunk spend their time.
    if let Some(q) = &plan.questions {
        crate::dataset::load_questions(q)?;
    }
    // A stage this plan disables (e.g. `[embed]` removed) must not feed its old artifacts to the
    // stages after it: its manifest and files are retired before anything reads them.
    for stage in &stages {
        if let Err(why) = stage.enabled(plan) {
            if store.manifest(stage.name())?.is_some() {
                retire(&store, stage.name())?;
                publish(stage.name())?;
                if !opts.quiet {
                    eprintln!(
                        "{:>9}  not run ({why}): its earlier artifacts are removed",
                        stage.name()
                    );
                }
            }
        }
    }
    let progress = Progress::new(opts.quiet);
    let mut outcomes = Vec::new();
    for stage in &stages {
        let name = stage.name();
        let selected = opts.stages.as_ref().is_none_or(|s| s.contains(&stage.id()));
        if !selected {
            continue;
        }
        if let Err(why) = stage.enabled(plan) {
            if !opts.quiet {
                eprintln!("{name:>9}  not run: {why}");
            }
            outcomes.push(StageOutcome {
                stage: name.into(),
                status: format!("disabled: {why}"),
                seconds: 0.0,
                rows: BTreeMap::new(),
                reused: 0,
            });
            continue;
        }
        let t0 = Instant::now();
        let mut inputs = BTreeMap::new();
        for input in stage.inputs() {
            if let Some(m) = store.manifest(input)? {
                inputs.insert(input.name().to_string(), content_hash(&m));
            } else if stages
                .iter()
                .any(|s| s.id() == *input && s.enabled(plan).is_ok())
            {
                return Err(Error::stage(
                    name,
                    format!("needs the artifacts of `{input}`: run that stage first"),
                ));
            }
        }
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
        let previous = store.manifest(name)?;
        let intact = previous.as_ref().is_some_and(|m| {
            m.fingerprint == fingerprint
                && m.files.iter().all(|f| {
                    store
                        .path_of(f)
                        .and_then(|p| std::fs::metadata(&p).at(&p))
                        .is_ok_and(|md| md.len() == f.bytes)
                })
        });
        if intact && !opts.force {
            let m = previous.expect("intact implies present");
            // A killed `--force` run leaves a journal and files beside an intact manifest.
            discard_journal(&store, name, &m)?;
            if !opts.quiet {
                eprintln!("{name:>9}  unchanged, skipped");
            }
            publish(name)?;
            outcomes.push(StageOutcome {
                stage: name.into(),
                status: "skipped".into(),
                seconds: t0.elapsed().as_secs_f64(),
                rows: rows_by_table(&m),
                reused: 0,
            });
            continue;
        }
        let started_unix = unix_now();
        // --force redoes the work: nothing from an earlier run or journal is reused.
        let writer = StageWriter::begin(&store, name, &fingerprint, !opts.force)?;
        let mut ctx = Ctx {
            plan,
            store: &store,
            writer,
            progress: &progress,
            probe,
            stage: name,
            errors: Vec::new(),
            stats: BTreeMap::new(),
        };
        stage.run(&mut ctx)?;
        // What the stage ran with, for `compare` and the run history.
        ctx.stat("config", config.clone());
        if let Some(mb) = peak_memory_mb() {
            ctx.stat("peak_rss_mb", mb);
        }
        let Ctx {
            mut writer,
            errors,
            stats,
            ..
        } = ctx;
        writer.write("errors", name, "", &errors)?;
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
        release_free_memory();
        publish(name)?;
        let rows = rows_by_table(&manifest);
        if !opts.quiet {
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
        outcomes.push(StageOutcome {
            stage: name.into(),
            status: "ran".into(),
            seconds: t0.elapsed().as_secs_f64(),
            rows,
            reused,
        });
    }
    // The run's figures join the history (a no-change rerun too: the history says it ran).
    let ran = outcomes.iter().filter(|o| o.status == "ran").count() as u32;
    let facts = crate::artifact::history::RunFacts {
        started_unix: run_started_unix,
        seconds: started.elapsed().as_secs_f64(),
        stages_ran: ran,
    };
    if opts.stages.is_none() && crate::artifact::history::append(&store, &facts)?.is_some() {
        publish(crate::artifact::history::DIR)?;
    }
    if let Some(r) = &remote {
        r.push_file(&plan.output_dir, RUN_RECORD)?;
    }
    let errors = store
        .files_of("errors")?
        .iter()
        .map(|f| f.rows as usize)
        .sum();
    Ok(RunReport {
        stages: outcomes,
        errors,
        seconds: started.elapsed().as_secs_f64(),
    })
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
    let as_shard = crate::shard::Shard { index: 0, count: 1 }.plan(plan);
    let stages: Vec<&str> = all_stages()
        .iter()
        .filter(|s| s.enabled(&as_shard).is_ok())
        .map(|s| s.name())
        .collect();
    crate::shard::check_complete(plan, &stages)
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

/// Runs `work` on groups of items, the groups in parallel (each item an index below `n`), and
/// puts each result at its item's index. The stages that open one scope (a repository's index,
/// its vectors) per group and drop it afterwards share this.
pub fn per_group<T: Send + Clone + Default>(
    groups: &BTreeMap<&str, Vec<usize>>,
    n: usize,
    work: impl Fn(&str, &[usize]) -> Result<Vec<(usize, T)>> + Sync,
) -> Result<Vec<T>> {
    use rayon::prelude::*;
    let done: Vec<Result<Vec<(usize, T)>>> =
        groups.par_iter().map(|(g, items)| work(g, items)).collect();
    let mut out = vec![T::default(); n];
    for group in done {
        for (i, t) in group? {
            out[i] = t;
        }
    }
    Ok(out)
}

/// The partitions of a per-scope stage: each question scope with the key of what its partition
/// is computed from: `base` (the stage's version, configuration and run-wide inputs), the
/// scope's questions, and what `inputs` names for the scope (the checksums of its input files).
pub fn scope_keys<B: serde::Serialize, T: serde::Serialize>(
    by_scope: &BTreeMap<String, Vec<crate::schema::QuestionRow>>,
    base: &B,
    inputs: impl Fn(&str) -> T,
) -> Vec<(String, String)> {
    by_scope
        .iter()
        .map(|(scope, qs)| (scope.clone(), hash_json(&(base, qs, inputs(scope)))))
        .collect()
}

/// Runs a stage that writes one partition of `table` per question scope. For each `(scope, key)`
/// of `jobs` it reuses the partition computed from the same key (an unchanged repository in a
/// nightly rerun, or a shard's output at the merge), or computes the scope's rows with `work` and
/// writes them at once. A few scopes are in flight at a time (one per core), so memory follows the
/// largest scopes, not the number of questions; the bar counts scopes.
pub fn per_scope<R: crate::schema::Row + Send>(
    ctx: &mut Ctx,
    table: &str,
    jobs: Vec<(String, String)>,
    work: impl Fn(&str) -> Result<Vec<R>> + Sync,
) -> Result<()> {
    per_scope_tables(ctx, &[table], jobs, |scope| {
        Ok(vec![crate::schema::to_batch(&work(scope)?)?])
    })
}

/// [`per_scope`] for a stage that writes a partition of each of several `tables` per scope:
/// `work` returns one record batch per table, in order; a scope is reused only when every table's
/// partition is.
pub fn per_scope_tables(
    ctx: &mut Ctx,
    tables: &[&str],
    jobs: Vec<(String, String)>,
    work: impl Fn(&str) -> Result<Vec<arrow::array::RecordBatch>> + Sync,
) -> Result<()> {
    use rayon::prelude::*;
    let bar = ctx.bar(jobs.len() as u64, "scopes");
    let mut todo = Vec::new();
    for (scope, key) in jobs {
        let mut all = true;
        for t in tables {
            all &= ctx.writer.reuse(t, &scope, &key)?.is_some();
        }
        if all {
            bar.inc(1);
        } else {
            todo.push((scope, key));
        }
    }
    let width = rayon::current_num_threads().max(1);
    for group in todo.chunks(width) {
        let done: Vec<Result<Vec<arrow::array::RecordBatch>>> =
            group.par_iter().map(|(s, _)| work(s)).collect();
        for ((scope, key), batches) in group.iter().zip(done) {
            for (t, b) in tables.iter().zip(batches?) {
                ctx.writer.write_batches(t, scope, key, b.schema(), &[b])?;
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(())
}

/// Blocks of 1 MiB and more get their own mapping, returned to the system when freed. Otherwise
/// glibc raises that threshold to the largest block freed so far (up to 32 MiB) and serves such
/// blocks from the heap, which rarely gives memory back, so one large repository's buffers stay
/// resident through the rest of the run. Measured at 457 repositories: peak 166 → 122 MiB, wall
/// time +2.6% (docs/performance.md, "Many repositories").
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes an allocator setting, under glibc's own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Hands memory freed by a finished stage back to the system. The allocator keeps freed memory in
/// per-thread arenas; without this, each stage's peak would stay resident through the next ones.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The process's peak resident memory so far, in MB (Linux): recorded in each stage's manifest as
/// `peak_rss_mb`, the peak of the run up to the end of that stage.
pub fn peak_memory_mb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb.div_ceil(1024))
}

fn rows_by_table(m: &Manifest) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    for f in &m.files {
        *rows.entry(f.table.clone()).or_insert(0) += f.rows;
    }
    rows
}
