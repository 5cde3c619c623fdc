//! Writing one stage: files streamed under temporary names and renamed, a journal that names
//! every file and temporary file the stage creates (for crash resume and for cleanup), and the
//! manifest written last. Cleanup removes only what this stage's own manifest or journal names.

use super::{
    formats, hex_of, part_stem, pending, safe_name, settle, sync_dir, temp_name, write_atomic,
    FileEntry, FileFormat, Manifest, Store, MANIFEST,
};
use crate::artifact::schema::{Row, Table};
use crate::error::{Error, IoContext, Result};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use tempfile::TempPath;

/// The journal's name in a stage directory.
pub(super) const JOURNAL: &str = "journal.jsonl";

#[derive(Serialize, Deserialize)]
struct JournalHeader {
    fingerprint: String,
}

/// A journal line naming a path (relative to the output directory) that this stage created or
/// is about to create: a temporary file, or a file a crashed run left for cleanup.
#[derive(Serialize, Deserialize)]
struct Named {
    named: String,
}

/// What a journal holds: its fingerprint, the files it finished, and every path it names.
struct Journal {
    fingerprint: Option<String>,
    finished: Vec<FileEntry>,
    named: Vec<String>,
}

fn read_journal(path: &Path) -> Journal {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines = text.lines();
    let fingerprint = lines
        .next()
        .and_then(|l| serde_json::from_str::<JournalHeader>(l).ok())
        .map(|h| h.fingerprint);
    let mut finished = Vec::new();
    let mut named = Vec::new();
    // A torn last line (crash mid-write) simply fails to parse and is dropped.
    for l in lines {
        if let Ok(e) = serde_json::from_str::<FileEntry>(l) {
            named.push(e.path.clone());
            finished.push(e);
        } else if let Ok(n) = serde_json::from_str::<Named>(l) {
            named.push(n.named);
        }
    }
    Journal {
        fingerprint,
        finished,
        named,
    }
}

/// Starts a journal at `path`: its header, then a line naming each of `named`, synced.
fn new_journal(path: &Path, fingerprint: &str, named: &[String]) -> Result<std::fs::File> {
    let mut journal = std::fs::File::create(path).at(path)?;
    let header = serde_json::to_string(&JournalHeader {
        fingerprint: fingerprint.to_string(),
    })
    .expect("header serializes");
    writeln!(journal, "{header}").at(path)?;
    for rel in named {
        let line = serde_json::to_string(&Named { named: rel.clone() }).expect("serializes");
        writeln!(journal, "{line}").at(path)?;
    }
    journal.sync_data().at(path)?;
    Ok(journal)
}

/// Removes the files `named` (relative paths) that `keep` does not list, each checked to lie
/// inside the output directory, then the table directories they leave empty.
fn remove_named(store: &Store, named: &[String], keep: &BTreeSet<String>) -> Result<()> {
    let mut dirs = BTreeSet::new();
    for rel in named {
        if keep.contains(rel) {
            continue;
        }
        let path = store.inside(rel)?;
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&path, e)),
        }
        if let Some(d) = path.parent() {
            dirs.insert(d.to_path_buf());
        }
    }
    for d in dirs.iter().rev() {
        let _ = std::fs::remove_dir(d); // only succeeds when empty
    }
    Ok(())
}

/// Removes what an interrupted run of `stage` left (the files and temporary files its journal
/// names that `manifest` does not list) and the journal itself. Used when the stage is skipped.
pub fn discard_journal(store: &Store, stage: &str, manifest: &Manifest) -> Result<()> {
    let path = store.root().join(stage).join(JOURNAL);
    if !path.exists() {
        return Ok(());
    }
    let keep: BTreeSet<String> = manifest.files.iter().map(|f| f.path.clone()).collect();
    remove_named(store, &read_journal(&path).named, &keep)?;
    std::fs::remove_file(&path).at(&path)
}

/// Removes a committed stage: its journal first names every file of its manifest (so that a
/// crash midway leaves them to the next commit's cleanup), then the manifest goes (readers stop
/// seeing the stage), then the files, then the journal.
pub fn retire(store: &Store, stage: &str) -> Result<()> {
    let Some(m) = store.manifest(stage)? else {
        return Ok(());
    };
    let dir = store.root().join(stage);
    let journal_path = dir.join(JOURNAL);
    let mut named = read_journal(&journal_path).named;
    named.extend(m.files.iter().map(|f| f.path.clone()));
    let journal = new_journal(&journal_path, "", &named)?;
    let manifest = store.manifest_path(stage);
    std::fs::remove_file(&manifest).at(&manifest)?;
    remove_named(store, &named, &BTreeSet::new())?;
    drop(journal);
    std::fs::remove_file(&journal_path).at(&journal_path)
}

/// Writes one stage's files and commits its manifest. Partitions finished before a crash are
/// kept in a journal and reused by the next run with the same fingerprint.
pub struct StageWriter {
    store: Store,
    stage: String,
    fingerprint: String,
    previous: Vec<FileEntry>,
    /// Paths of earlier runs (manifest and journal) that commit removes unless it keeps them.
    stale: Vec<String>,
    journal_path: PathBuf,
    journal: std::fs::File,
    written: Vec<FileEntry>,
    reused: usize,
    /// Directories this run renamed files into: synced before the manifest is written, so that
    /// a committed manifest never names a file whose directory entry a crash could lose.
    touched: BTreeSet<PathBuf>,
}

impl StageWriter {
    /// Starts writing `stage`. With `reuse`, partitions of the previous manifest and of a journal
    /// of the same fingerprint can be reused (see [`StageWriter::reuse`]).
    pub fn begin(
        store: &Store,
        stage: &str,
        fingerprint: &str,
        reuse: bool,
    ) -> Result<StageWriter> {
        let dir = store.root.join(stage);
        std::fs::create_dir_all(&dir).at(&dir)?;
        let old_manifest = store.manifest(stage)?.map(|m| m.files).unwrap_or_default();
        let journal_path = dir.join(JOURNAL);
        let old = read_journal(&journal_path);
        let mut stale: Vec<String> = old_manifest.iter().map(|f| f.path.clone()).collect();
        stale.extend(old.named.iter().cloned());
        // A path that leaves the output directory (a tampered manifest or journal) stops the
        // stage before it does anything.
        for rel in &stale {
            store.inside(rel)?;
        }
        let mut previous: Vec<FileEntry> = Vec::new();
        if reuse {
            // What shards of this output directory committed, then this directory's own.
            previous = super::committed_files(&store.root, stage)?;
            previous.extend(old_manifest);
            if old.fingerprint.as_deref() == Some(fingerprint) {
                previous.extend(old.finished);
            }
        }
        // The new journal names everything the old one did, so that a crash now loses nothing
        // that a later commit must clean.
        let journal = new_journal(&journal_path, fingerprint, &old.named)?;
        Ok(StageWriter {
            store: store.clone(),
            stage: stage.to_string(),
            fingerprint: fingerprint.to_string(),
            previous,
            stale,
            journal_path,
            journal,
            written: Vec::new(),
            reused: 0,
            touched: BTreeSet::new(),
        })
    }

    /// Names `rel` in the journal before it is created, so that cleanup may remove it later.
    fn name(&mut self, rel: &str) -> Result<PathBuf> {
        let path = self.store.inside(rel)?;
        let line = serde_json::to_string(&Named {
            named: rel.to_string(),
        })
        .expect("serializes");
        writeln!(self.journal, "{line}").at(&self.journal_path)?;
        self.journal.sync_data().at(&self.journal_path)?;
        self.stale.push(rel.to_string());
        Ok(path)
    }

    /// Reuses an earlier file of `table`/`part` computed from the same `key`, if it is intact.
    pub fn reuse(&mut self, table: Table, part: &str, key: &str) -> Result<Option<FileEntry>> {
        let found = self
            .previous
            .iter()
            .rev()
            .find(|f| f.is(table) && f.part == part && f.key == key)
            .cloned();
        let Some(mut entry) = found else {
            return Ok(None);
        };
        // A file named before the current naming rule is made again under its name.
        let file_name = entry.path.rsplit('/').next().unwrap_or_default();
        if !file_name.starts_with(&format!("{}-", part_stem(part))) {
            return Ok(None);
        }
        let path = self.store.path_of(&entry)?;
        match std::fs::metadata(&path) {
            Ok(m) if m.len() == entry.bytes => {}
            _ => return Ok(None),
        }
        if let Some(own) = self.shard_origin(&entry) {
            // A shard's file: checked whole (it may come from another machine), then linked in
            // under this stage's own name, so the merged output stands alone.
            if self.store.verify(&entry, true).is_err() {
                return Ok(None);
            }
            let target = self.name(&own)?;
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir).at(dir)?;
            }
            let _ = std::fs::remove_file(&target);
            if std::fs::hard_link(&path, &target).is_err() {
                std::fs::copy(&path, &target).at(&target)?;
            }
            entry.path = own;
        }
        self.record(entry.clone())?;
        self.reused += 1;
        Ok(Some(entry))
    }

    /// For a file a shard committed (`shards/<i>-of-<n>/<stage>/…`), the path it takes in this
    /// output directory (`<stage>/…`).
    fn shard_origin(&self, entry: &FileEntry) -> Option<String> {
        let rest = entry
            .path
            .strip_prefix(super::SHARDS_DIR)?
            .strip_prefix('/')?;
        let (_, own) = rest.split_once('/')?;
        own.starts_with(&format!("{}/", self.stage))
            .then(|| own.to_string())
    }

    fn record(&mut self, entry: FileEntry) -> Result<()> {
        let line = serde_json::to_string(&entry).expect("entry serializes");
        writeln!(self.journal, "{line}").at(&self.journal_path)?;
        self.journal.sync_data().at(&self.journal_path)?;
        self.written
            .retain(|f| !(f.table == entry.table && f.part == entry.part));
        self.written.push(entry);
        Ok(())
    }

    /// Writes rows as `R`'s table, partition `part`.
    pub fn write<R: Row>(&mut self, part: &str, key: &str, rows: &[R]) -> Result<FileEntry> {
        self.write_as(R::TABLE, part, key, rows)
    }

    /// Writes rows as `table`/`part`, for a row type that more than one table holds.
    pub fn write_as<R: Row>(
        &mut self,
        table: Table,
        part: &str,
        key: &str,
        rows: &[R],
    ) -> Result<FileEntry> {
        let batch = crate::artifact::schema::to_batch(rows)?;
        self.write_batches(table, part, key, batch.schema(), &[batch])
    }

    /// Writes record batches as `table`/`part` (Parquet).
    pub fn write_batches(
        &mut self,
        table: Table,
        part: &str,
        key: &str,
        schema: SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<FileEntry> {
        let mut w = self.part(table, part, key, schema, FileFormat::Parquet)?;
        for b in batches {
            w.write(b)?;
        }
        self.finish(w)
    }

    /// Starts a file of `table`/`part` that batches are streamed into; [`StageWriter::finish`]
    /// makes it visible to the journal (and, at commit, to readers).
    pub fn part(
        &mut self,
        table: Table,
        part: &str,
        key: &str,
        schema: SchemaRef,
        format: FileFormat,
    ) -> Result<PartWriter> {
        let dir = format!("{}/{}", self.stage, safe_name(table.name()));
        let tmp = temp_name(Path::new(&dir), &safe_name(part));
        let tmp = self.name(&tmp.to_string_lossy())?;
        let (file, tmp) = pending(&tmp)?;
        let sink = Hashing {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            sha: Sha256::new(),
            bytes: 0,
        };
        let bad = |e: String| Error::artifact(&tmp, e);
        let sink = match format {
            FileFormat::Parquet => {
                let props = formats::writer_properties(table.zstd());
                Sink::Parquet(
                    ArrowWriter::try_new(sink, schema, Some(props))
                        .map_err(|e| bad(e.to_string()))?,
                )
            }
            FileFormat::ArrowIpc => Sink::Ipc(
                arrow::ipc::writer::FileWriter::try_new(sink, &schema)
                    .map_err(|e| bad(e.to_string()))?,
            ),
        };
        Ok(PartWriter {
            table: table.to_string(),
            part: part.to_string(),
            key: key.to_string(),
            tmp,
            format,
            sink,
            rows: 0,
        })
    }

    /// Closes a streamed file, names it by its checksum and records it.
    pub fn finish(&mut self, w: PartWriter) -> Result<FileEntry> {
        let PartWriter {
            table,
            part,
            key,
            tmp,
            format,
            sink,
            rows,
        } = w;
        let bad = |e: String| Error::artifact(&tmp, e);
        let hashing = match sink {
            Sink::Parquet(w) => w.into_inner().map_err(|e| bad(e.to_string()))?,
            Sink::Ipc(w) => w.into_inner().map_err(|e| bad(e.to_string()))?,
        };
        let Hashing { inner, sha, bytes } = hashing;
        let file = inner
            .into_inner()
            .map_err(|e| Error::io(&tmp, e.into_error()))?;
        let sha = hex_of(&sha.finalize());
        let rel = format!(
            "{}/{table}/{}-{}.{}",
            self.stage,
            part_stem(&part),
            &sha[..12],
            format.extension()
        );
        let path = self.store.inside(&rel)?;
        settle(file, tmp, &path)?;
        if let Some(dir) = path.parent() {
            self.touched.insert(dir.to_path_buf());
        }
        let entry = FileEntry {
            table,
            path: rel,
            part,
            key,
            rows,
            bytes,
            sha256: sha,
        };
        self.record(entry.clone())?;
        Ok(entry)
    }

    /// A scratch file of this stage for intermediate results: its path, and an entry that
    /// [`Store::map_ipc`] takes once it is written. Its name marks it temporary, so a crash
    /// leaves nothing the next commit does not remove; the caller removes it when done.
    pub fn scratch(&mut self, name: &str) -> Result<(PathBuf, FileEntry)> {
        let file = format!(".{}.tmp-{}", safe_name(name), std::process::id());
        let rel = format!("{}/{file}", self.stage);
        let path = self.name(&rel)?;
        let entry = FileEntry {
            table: String::new(),
            path: rel,
            part: String::new(),
            key: String::new(),
            rows: 0,
            bytes: 0,
            sha256: String::new(),
        };
        Ok((path, entry))
    }

    /// The file of `table`/`part` written or reused so far in this run.
    pub fn entry(&self, table: Table, part: &str) -> Option<&FileEntry> {
        self.written
            .iter()
            .rev()
            .find(|f| f.is(table) && f.part == part)
    }

    /// The files of `table` written or reused so far in this run.
    pub fn files(&self, table: Table) -> Vec<FileEntry> {
        self.written
            .iter()
            .filter(|f| f.is(table))
            .cloned()
            .collect()
    }

    /// Number of partitions reused rather than recomputed.
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// Writes the manifest (last), then removes what earlier runs and this one named but the
    /// manifest does not list, and the journal.
    pub fn commit(mut self, mut manifest: Manifest) -> Result<Manifest> {
        manifest.stage = self.stage.clone();
        manifest.fingerprint = self.fingerprint.clone();
        manifest.files = std::mem::take(&mut self.written);
        let path = self.store.manifest_path(&self.stage);
        let tmp = temp_name(Path::new(&self.stage), MANIFEST);
        self.name(&tmp.to_string_lossy())?;
        let json = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
        // Files, then their directories, then the stage directory (the table directories' own
        // entries), then the manifest: what it names is on disk before it is.
        for dir in &self.touched {
            sync_dir(dir)?;
        }
        if let Some(stage_dir) = path.parent() {
            sync_dir(stage_dir)?;
        }
        write_atomic(&path, &json)?;
        let keep: BTreeSet<String> = manifest.files.iter().map(|f| f.path.clone()).collect();
        remove_named(&self.store, &self.stale, &keep)?;
        drop(self.journal);
        let _ = std::fs::remove_file(&self.journal_path);
        Ok(manifest)
    }
}

/// A writer that hashes and counts what passes through it.
pub struct Hashing<W> {
    inner: W,
    sha: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

type FileSink = Hashing<std::io::BufWriter<std::fs::File>>;

enum Sink {
    Parquet(ArrowWriter<FileSink>),
    Ipc(arrow::ipc::writer::FileWriter<FileSink>),
}

/// One table file being streamed to disk (under a temporary name until finished).
pub struct PartWriter {
    table: String,
    part: String,
    key: String,
    tmp: TempPath,
    format: FileFormat,
    sink: Sink,
    rows: u64,
}

impl PartWriter {
    /// Appends a batch.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        self.rows += batch.num_rows() as u64;
        let r = match &mut self.sink {
            Sink::Parquet(w) => w.write(batch).map_err(|e| e.to_string()),
            Sink::Ipc(w) => w.write(batch).map_err(|e| e.to_string()),
        };
        r.map_err(|e| Error::artifact(&self.tmp, e))
    }

    /// Drops an unfinished file (its input failed part-way): the temporary file is removed, and
    /// nothing is recorded.
    pub fn discard(self) -> Result<()> {
        let Self { tmp, sink, .. } = self;
        drop(sink);
        let path = tmp.to_path_buf();
        tmp.close().at(&path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifact::schema::ErrorRow;
    use crate::artifact::FORMAT_VERSION;
    use std::collections::BTreeMap;

    fn manifest() -> Manifest {
        Manifest {
            stage: String::new(),
            fingerprint: String::new(),
            config_hash: "c".into(),
            inputs: BTreeMap::new(),
            tool_version: "t".into(),
            format_version: FORMAT_VERSION,
            started_unix: 0,
            seconds: 0.0,
            files: vec![],
            stats: BTreeMap::new(),
        }
    }

    fn rows(n: usize) -> Vec<ErrorRow> {
        (0..n)
            .map(|i| ErrorRow {
                repo: Some(format!("r{i}")),
                stage: "s".into(),
                message: "m".into(),
            })
            .collect()
    }

    #[test]
    fn uncommitted_files_are_invisible_and_journal_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut w = StageWriter::begin(&store, "s", "fp1", true).unwrap();
        w.write("a", "ka", &rows(2)).unwrap();
        // Crash: no commit. Nothing is visible...
        drop(w);
        assert!(store.tables().unwrap().is_empty());
        // ...but a re-run with the same fingerprint reuses the finished partition.
        let mut w = StageWriter::begin(&store, "s", "fp1", true).unwrap();
        assert!(w.reuse(Table::Errors, "a", "ka").unwrap().is_some());
        assert!(w.reuse(Table::Errors, "a", "other-key").unwrap().is_none());
        w.write("b", "kb", &rows(3)).unwrap();
        let m = w.commit(manifest()).unwrap();
        assert_eq!(m.rows(Table::Errors), 5);
        assert_eq!(store.read::<ErrorRow>().unwrap().len(), 5);
        assert!(!dir.path().join("s/journal.jsonl").exists());
    }

    #[test]
    fn a_manifest_of_another_format_is_an_error_naming_who_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut w = StageWriter::begin(&store, "s", "fp1", true).unwrap();
        w.write("a", "ka", &rows(1)).unwrap();
        w.commit(manifest()).unwrap();
        let path = store.manifest_path("s");
        let committed = store.manifest("s").unwrap().unwrap();
        let with_format = |v: u32| {
            let mut m = committed.clone();
            m.format_version = v;
            write_atomic(&path, &serde_json::to_vec(&m).unwrap()).unwrap();
            store.manifest("s")
        };
        for v in [crate::artifact::OLDEST_FORMAT, FORMAT_VERSION] {
            assert_eq!(with_format(v).unwrap().unwrap().format_version, v);
        }
        let newer = with_format(FORMAT_VERSION + 1).unwrap_err().to_string();
        assert!(newer.contains("written by a newer ri-batch"), "{newer}");
        assert!(newer.contains("manifest.json"), "{newer}");
        let older = with_format(0).unwrap_err().to_string();
        assert!(older.contains("written by an older ri-batch"), "{older}");
        // Readers of the store refuse it too, rather than read its files.
        assert!(store.read::<ErrorRow>().is_err());
    }

    #[test]
    fn a_new_fingerprint_drops_the_journal_and_commit_collects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut w = StageWriter::begin(&store, "s", "fp1", true).unwrap();
        let first = w.write("a", "ka", &rows(1)).unwrap();
        drop(w);
        let mut w = StageWriter::begin(&store, "s", "fp2", true).unwrap();
        assert!(w.reuse(Table::Errors, "a", "ka").unwrap().is_none());
        w.write("a", "ka2", &rows(4)).unwrap();
        w.commit(manifest()).unwrap();
        assert!(
            !dir.path().join(&first.path).exists(),
            "unlisted file was removed"
        );
        assert_eq!(store.read::<ErrorRow>().unwrap().len(), 4);
    }

    #[test]
    fn corrupted_files_are_reported_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut w = StageWriter::begin(&store, "s", "fp", true).unwrap();
        let e = w.write("a", "k", &rows(1)).unwrap();
        w.commit(manifest()).unwrap();
        let p = dir.path().join(&e.path);
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        let err = store.read::<ErrorRow>().unwrap_err().to_string();
        assert!(err.contains(&e.path) && err.contains("checksum"), "{err}");
    }

    #[test]
    fn no_partition_file_is_hidden_from_directory_readers_and_old_names_are_remade() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut w = StageWriter::begin(&store, "s", "fp", true).unwrap();
        for part in ["*", "_x", ".y", "ok"] {
            let e = w.write(part, "k", &rows(1)).unwrap();
            let file = e.path.rsplit_once('/').unwrap().1;
            assert!(!file.starts_with(['_', '.']), "{part}: {file}");
        }
        w.commit(manifest()).unwrap();
        // A file committed under the old rule (`*` as `_-…`) is not reused: it is made again.
        let mut m = store.manifest("s").unwrap().unwrap();
        let star = m.files.iter_mut().find(|f| f.part == "*").unwrap();
        let old = star.path.replace("/part_-", "/_-");
        std::fs::rename(dir.path().join(&star.path), dir.path().join(&old)).unwrap();
        star.path = old;
        write_atomic(&store.manifest_path("s"), &serde_json::to_vec(&m).unwrap()).unwrap();
        let mut w = StageWriter::begin(&store, "s", "fp2", true).unwrap();
        assert!(w.reuse(Table::Errors, "*", "k").unwrap().is_none());
        assert!(w.reuse(Table::Errors, "ok", "k").unwrap().is_some());
    }
}
