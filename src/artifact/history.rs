//! Run history: every finished run appends what it measured and what it ran with to
//! `<output_dir>/history/`, a directory committed like a stage (its files first, then its
//! manifest), so that SQL over `history`, `history_questions` and `history_runs` gives trends and
//! `ri-batch compare` can diff any two runs.

use super::columns::{f, f64f, u32f, u64f, utf8};
use super::{hash_json, sha256_hex, write_atomic, FileEntry, Manifest, Store, FORMAT_VERSION};
use crate::artifact::schema::{to_batch, EvaluationRow, RevisionRow, Row, SummaryRow, Table};
use crate::error::{Error, Result};
use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::FieldRef;
use arrow::datatypes::{DataType, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The history's directory (and pseudo-stage) name in an output directory.
pub const DIR: &str = "history";
/// Per-run summary rows (`summary` plus `run_id`).
pub const SUMMARY: Table = Table::History;
/// Per-run, per-question metrics (`evaluation` plus `run_id`).
pub const QUESTIONS: Table = Table::HistoryQuestions;

/// `history_runs`: one row per run: when, with what, over which revisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// `YYYYMMDDTHHMMSSZ-<8 hex>`: sorts by time.
    pub run_id: String,
    pub started_unix: u64,
    /// Hash of every stage's configuration (the pipeline as the stages saw it).
    pub pipeline_hash: String,
    /// Hash of the (scope, commit) pairs the run read.
    pub revisions_hash: String,
    pub tool_version: String,
    pub seconds: f64,
    pub stages_ran: u32,
    /// JSON: stage → its configuration.
    pub configs: String,
    /// JSON: scope → commit.
    pub revisions: String,
}

impl Row for RunRow {
    const TABLE: Table = Table::HistoryRuns;
    fn fields() -> Vec<FieldRef> {
        vec![
            utf8("run_id"),
            u64f("started_unix"),
            utf8("pipeline_hash"),
            utf8("revisions_hash"),
            utf8("tool_version"),
            f64f("seconds"),
            u32f("stages_ran"),
            utf8("configs"),
            utf8("revisions"),
        ]
    }
}

/// What the run that is appending did, as the pipeline tells it.
pub struct RunFacts {
    pub started_unix: u64,
    pub seconds: f64,
    pub stages_ran: u32,
}

/// One stored run, read back: its record and its per-question metrics.
#[derive(Debug, Clone)]
pub struct Entry {
    pub run: RunRow,
    pub questions: Vec<EvaluationRow>,
}

impl Entry {
    /// Stage → configuration, as the run recorded it.
    pub fn configs(&self) -> BTreeMap<String, Value> {
        serde_json::from_str(&self.run.configs).unwrap_or_default()
    }
    /// Scope → commit.
    pub fn revisions(&self) -> BTreeMap<String, String> {
        serde_json::from_str(&self.run.revisions).unwrap_or_default()
    }
}

/// Stage → the configuration its manifest recorded (stages before this record have none).
pub fn configs(store: &Store) -> Result<BTreeMap<String, Value>> {
    Ok(store
        .manifests()?
        .into_iter()
        .filter(|(stage, _)| stage != DIR)
        .filter_map(|(stage, m)| Some((stage, m.stats.get("config")?.clone())))
        .collect())
}

/// Scope → commit of the run's `revisions` table (empty before any scan).
pub fn revisions(store: &Store) -> Result<BTreeMap<String, String>> {
    if store.files_of(RevisionRow::TABLE)?.is_empty() {
        return Ok(BTreeMap::new());
    }
    let rows: Vec<RevisionRow> = store.read()?;
    Ok(rows
        .into_iter()
        .map(|r| (r.scope.to_string(), r.commit))
        .collect())
}

/// Appends the run now committed in `store` (it must have evaluated) to its history; returns
/// the new run id, or None when there is nothing evaluated to record.
pub fn append(store: &Store, facts: &RunFacts) -> Result<Option<String>> {
    if store
        .manifest(crate::artifact::StageId::Evaluate)?
        .is_none()
    {
        return Ok(None);
    }
    let summary: Vec<SummaryRow> = store.read()?;
    let questions: Vec<EvaluationRow> = store.read()?;
    let configs = configs(store)?;
    let revisions = revisions(store)?;
    let pipeline_hash = hash_json(&configs);
    let revisions_hash = hash_json(&revisions);
    let previous = store.manifest(DIR)?;
    sweep(store, previous.as_ref())?;
    // Unique however close two runs come: the clock to the nanosecond and the entries so far.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let count = previous.as_ref().map_or(0, |m| m.files.len());
    let nonce = hash_json(&(nanos.to_string(), std::process::id(), count, &pipeline_hash));
    let run_id = format!("{}-{}", utc_stamp(facts.started_unix), &nonce[..8]);
    let run = RunRow {
        run_id: run_id.clone(),
        started_unix: facts.started_unix,
        pipeline_hash: pipeline_hash[..16].to_string(),
        revisions_hash: revisions_hash[..16].to_string(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        seconds: facts.seconds,
        stages_ran: facts.stages_ran,
        configs: serde_json::to_string(&configs).unwrap_or_default(),
        revisions: serde_json::to_string(&revisions).unwrap_or_default(),
    };
    let mut manifest = previous.unwrap_or_else(|| Manifest {
        stage: DIR.into(),
        fingerprint: String::new(),
        config_hash: String::new(),
        inputs: BTreeMap::new(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        format_version: FORMAT_VERSION,
        started_unix: facts.started_unix,
        seconds: 0.0,
        files: Vec::new(),
        stats: BTreeMap::new(),
    });
    // Files first, each under its own new name; the manifest that lists them last.
    let batches = [
        (RunRow::TABLE, to_batch(&[run])?),
        (SUMMARY, tagged(&run_id, to_batch(&summary)?)?),
        (QUESTIONS, tagged(&run_id, to_batch(&questions)?)?),
    ];
    for (table, batch) in batches {
        // One folder per table, as a stage lays them out: any Parquet client reads it whole.
        let rel = format!("{DIR}/{table}/{run_id}.parquet");
        let bytes = super::formats::encode_parquet(batch.schema(), std::slice::from_ref(&batch))?;
        let path = store.inside(&rel)?;
        write_atomic(&path, &bytes)?;
        manifest.files.push(FileEntry {
            table: table.name().into(),
            path: rel,
            part: run_id.clone(),
            key: String::new(),
            rows: batch.num_rows() as u64,
            bytes: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
        });
    }
    manifest.tool_version = env!("CARGO_PKG_VERSION").into();
    let text = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| Error::artifact(store.manifest_path(DIR), e))?;
    write_atomic(&store.manifest_path(DIR), &text)?;
    Ok(Some(run_id))
}

/// Removes what an append killed before its manifest left behind: any file in the history's
/// table folders that the manifest does not list (a killed run's Parquet files, which a reader
/// globbing the folder would otherwise count as a run).
fn sweep(store: &Store, manifest: Option<&Manifest>) -> Result<()> {
    use crate::error::IoContext;
    let listed: std::collections::HashSet<&str> = manifest
        .map(|m| m.files.iter().map(|f| f.path.as_str()).collect())
        .unwrap_or_default();
    for table in [RunRow::TABLE, SUMMARY, QUESTIONS] {
        let folder = format!("{DIR}/{table}");
        let dir = store.inside(&folder)?;
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let rel = format!("{folder}/{}", e.file_name().to_string_lossy());
            if e.file_type().is_ok_and(|t| t.is_file()) && !listed.contains(rel.as_str()) {
                std::fs::remove_file(e.path()).at(e.path())?;
            }
        }
    }
    Ok(())
}

/// The ids of every recorded run, oldest first, as the history's manifest lists them (no file
/// is read).
pub fn run_ids(store: &Store) -> Result<Vec<String>> {
    let Some(m) = store.manifest(DIR)? else {
        return Ok(Vec::new());
    };
    let mut ids: Vec<String> = m
        .files
        .iter()
        .filter(|f| f.is(RunRow::TABLE))
        .map(|f| f.part.clone())
        .collect();
    ids.sort();
    Ok(ids)
}

/// The id `which` names among `ids` (oldest first): a run id or unique id prefix, `last`, or
/// `last~N` (N runs before the last).
fn resolve<'a>(ids: &'a [String], which: &str, dir: &Path) -> Result<&'a str> {
    if let Some(back) = which.strip_prefix("last") {
        let n: usize = match back.strip_prefix('~') {
            Some(n) => n.parse().map_err(|_| {
                Error::Invalid(format!("`{which}`: write last, or last~N with N a number"))
            })?,
            None if back.is_empty() => 0,
            None => return Err(Error::Invalid(format!("`{which}`: write last or last~N"))),
        };
        return ids
            .len()
            .checked_sub(n + 1)
            .map(|i| ids[i].as_str())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: {} runs recorded, so there is no `{which}`",
                    dir.display(),
                    ids.len()
                ))
            });
    }
    let found: Vec<&String> = ids.iter().filter(|r| r.starts_with(which)).collect();
    match found.as_slice() {
        [one] => Ok(one.as_str()),
        [] => Err(Error::Invalid(format!(
            "{}: no recorded run `{which}`",
            dir.display()
        ))),
        _ => Err(Error::Invalid(format!(
            "{}: `{which}` names {} runs; give more of the id",
            dir.display(),
            found.len()
        ))),
    }
}

/// One recorded run by id, unique id prefix, `last` or `last~N`: only its own files are read
/// (each checked against the history's manifest as it is read).
pub fn entry(store: &Store, which: &str) -> Result<Entry> {
    let dir = store.root().join(DIR);
    let Some(m) = store.manifest(DIR)? else {
        return Err(Error::Invalid(format!(
            "{}: no runs recorded",
            dir.display()
        )));
    };
    let ids = run_ids(store)?;
    let id = resolve(&ids, which, &dir)?;
    let (mut run, mut questions) = (None, Vec::new());
    for f in m.files.iter().filter(|f| f.part == id) {
        match Table::named(&f.table) {
            Some(RunRow::TABLE) => run = store.read_rows::<RunRow>(f)?.pop(),
            Some(QUESTIONS) => questions.extend(store.read_rows::<EvaluationRow>(f)?),
            _ => {}
        }
    }
    let run = run.ok_or_else(|| Error::artifact(&dir, format!("run `{id}` has no record")))?;
    Ok(Entry { run, questions })
}

/// `batch` with a leading `run_id` column.
fn tagged(run_id: &str, batch: RecordBatch) -> Result<RecordBatch> {
    let mut fields: Vec<FieldRef> = vec![f("run_id", DataType::Utf8, false)];
    fields.extend(batch.schema().fields().iter().cloned());
    let mut columns: Vec<ArrayRef> =
        vec![Arc::new(StringArray::from(vec![run_id; batch.num_rows()]))];
    columns.extend(batch.columns().iter().cloned());
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::Invalid(format!("history batch: {e}")))
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time (UTC, proleptic Gregorian).
pub fn utc_stamp(unix: u64) -> String {
    let (days, secs) = ((unix / 86_400) as i64, unix % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Rows of `table` read through `from_batch` (for tests of the tagged layout).
#[cfg(test)]
fn untag<R: serde::de::DeserializeOwned>(batch: &RecordBatch) -> Result<Vec<R>> {
    crate::artifact::schema::from_batch(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_times() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z");
        assert_eq!(utc_stamp(1_796_137_261), "20261201T150101Z");
    }

    #[test]
    fn tagged_rows_read_back_as_their_own_type() {
        let rows = vec![EvaluationRow {
            variant: "bm25".into(),
            question_id: "q1".into(),
            repo: crate::artifact::scope::Scope::repo("r"),
            split: "dev".into(),
            answerable: true,
            pool_recall: Some(1.0),
            packed_recall: Some(0.5),
            tokens_used: 10,
            mrr10: None,
            ndcg10: None,
            recall10: None,
            recall100: None,
            outcome: None,
            acc1: None,
            acc5: None,
            acc10: None,
        }];
        let batch = tagged("run-1", to_batch(&rows).unwrap()).unwrap();
        assert_eq!(batch.schema().field(0).name(), "run_id");
        let back: Vec<EvaluationRow> = untag(&batch).unwrap();
        assert_eq!(back, rows);
    }
}
