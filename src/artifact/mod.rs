//! The only module that knows the disk layout: Parquet files written under a temporary name and
//! renamed, a per-stage journal for crash resume, and the JSON manifest written last. A file no
//! manifest lists does not exist to readers.
//!
//! Layout: `<output_dir>/<stage>/manifest.json` and `<output_dir>/<stage>/<table>/<part>-<sha12>.parquet`
//! (`.arrow` for tables stored as Arrow IPC files to be memory-mapped, such as `bm25_index`).

use crate::error::{Error, IoContext, Result};
use crate::schema::{from_batch, Row};
use arrow::array::{Array, AsArray, BooleanArray, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod cache;
mod formats;
pub use cache::VectorCache;
pub use formats::{encode_parquet, read_ipc, read_parquet_bytes, read_parquet_columns};

/// Bumped when an artifact's layout or meaning changes; part of every fingerprint.
pub const FORMAT_VERSION: u32 = 1;

/// `name` with every character outside letters, digits and `-_.@` replaced by `_` (file names).
pub fn safe_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_of(&Sha256::digest(bytes))
}

fn hex_of(digest: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(digest.len() * 2);
    for b in digest {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Hex SHA-256 of the JSON form of `value` (stable: serde_json keeps struct field order).
pub fn hash_json<T: Serialize>(value: &T) -> String {
    sha256_hex(&serde_json::to_vec(value).expect("config values serialize"))
}

/// One Parquet file of a table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    pub table: String,
    /// Path relative to the output directory.
    pub path: String,
    /// Partition name (usually a repository).
    pub part: String,
    /// Hash of everything this partition was computed from; equal key → the file can be reused.
    pub key: String,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
}

/// What a stage wrote, written last.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub stage: String,
    pub fingerprint: String,
    pub config_hash: String,
    /// Fingerprints of the stages this one read.
    pub inputs: BTreeMap<String, String>,
    pub tool_version: String,
    pub format_version: u32,
    pub started_unix: u64,
    pub seconds: f64,
    pub files: Vec<FileEntry>,
    /// Stage-specific counters and notes (rows per table, reused partitions, ...).
    pub stats: BTreeMap<String, serde_json::Value>,
}

/// How an artifact file is encoded, told by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// Parquet (every table that SQL clients read).
    Parquet,
    /// An Arrow IPC file, uncompressed and aligned, for memory-mapped access in place.
    ArrowIpc,
}

impl FileFormat {
    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Parquet => "parquet",
            FileFormat::ArrowIpc => "arrow",
        }
    }
}

impl FileEntry {
    pub fn format(&self) -> FileFormat {
        if self.path.ends_with(".arrow") {
            FileFormat::ArrowIpc
        } else {
            FileFormat::Parquet
        }
    }
}

impl Manifest {
    /// Row count of `table` in this manifest.
    pub fn rows(&self, table: &str) -> u64 {
        self.files
            .iter()
            .filter(|f| f.table == table)
            .map(|f| f.rows)
            .sum()
    }
}

/// Read access to one pipeline's output directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn manifest_path(&self, stage: &str) -> PathBuf {
        self.root.join(stage).join("manifest.json")
    }

    /// The committed manifest of `stage`, if any.
    pub fn manifest(&self, stage: &str) -> Result<Option<Manifest>> {
        let p = self.manifest_path(stage);
        match std::fs::read(&p) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::artifact(&p, format!("unreadable manifest: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(&p, e)),
        }
    }

    /// Every committed manifest, by stage.
    pub fn manifests(&self) -> Result<BTreeMap<String, Manifest>> {
        let mut out = BTreeMap::new();
        let rd = match std::fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(Error::io(&self.root, e)),
        };
        for entry in rd {
            let entry = entry.at(&self.root)?;
            let name = entry.file_name().to_string_lossy().to_string();
            if entry.path().is_dir() && !name.starts_with('.') {
                if let Some(m) = self.manifest(&name)? {
                    out.insert(name, m);
                }
            }
        }
        Ok(out)
    }

    /// Every table and the absolute paths of its files, across all committed manifests.
    pub fn tables(&self) -> Result<BTreeMap<String, Vec<PathBuf>>> {
        let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for m in self.manifests()?.values() {
            for f in &m.files {
                out.entry(f.table.clone())
                    .or_default()
                    .push(self.root.join(&f.path));
            }
        }
        Ok(out)
    }

    /// The committed files of `table`, from whichever stage wrote it.
    pub fn files_of(&self, table: &str) -> Result<Vec<FileEntry>> {
        let mut out = Vec::new();
        for m in self.manifests()?.values() {
            out.extend(m.files.iter().filter(|f| f.table == table).cloned());
        }
        Ok(out)
    }

    /// Reads the named columns of one file (all when `None`), checking its size and checksum.
    pub fn read_columns(
        &self,
        entry: &FileEntry,
        columns: Option<&[&str]>,
    ) -> Result<Vec<RecordBatch>> {
        let path = self.root.join(&entry.path);
        let bytes = std::fs::read(&path).at(&path)?;
        if bytes.len() as u64 != entry.bytes || sha256_hex(&bytes) != entry.sha256 {
            return Err(Error::artifact(&path, "file does not match its manifest (size or checksum); re-run the stage with --force"));
        }
        match entry.format() {
            FileFormat::Parquet => read_parquet_columns(&path, bytes::Bytes::from(bytes), columns),
            FileFormat::ArrowIpc => read_ipc(&path, &Buffer::from_vec(bytes)),
        }
    }

    /// Reads every row of `table`.
    pub fn read<R: serde::de::DeserializeOwned>(&self, table: &str) -> Result<Vec<R>> {
        let mut rows = Vec::new();
        for entry in self.files_of(table)? {
            rows.extend(self.read_rows::<R>(&entry)?);
        }
        Ok(rows)
    }

    /// Reads the rows of one file.
    pub fn read_rows<R: serde::de::DeserializeOwned>(&self, entry: &FileEntry) -> Result<Vec<R>> {
        self.read_rows_of(entry, None)
    }

    /// Reads the rows of one file into `R`, decoding only `columns` (the fields of `R`) when given.
    pub fn read_rows_of<R: serde::de::DeserializeOwned>(
        &self,
        entry: &FileEntry,
        columns: Option<&[&str]>,
    ) -> Result<Vec<R>> {
        let mut rows = Vec::new();
        for b in self.read_columns(entry, columns)? {
            rows.extend(from_batch::<R>(&b).map_err(|e| Error::artifact(&entry.path, e))?);
        }
        Ok(rows)
    }

    /// The rows of `table` whose string column `key` passes `keep`, one file at a time, decoding
    /// only `columns`: memory follows the rows kept, not the table.
    pub fn read_where<R: serde::de::DeserializeOwned>(
        &self,
        table: &str,
        columns: &[&str],
        key: &str,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<R>> {
        let mut rows = Vec::new();
        for entry in self.files_of(table)? {
            for b in self.read_columns(&entry, Some(columns))? {
                let col = b
                    .column_by_name(key)
                    .and_then(|c| c.as_string_opt::<i32>())
                    .ok_or_else(|| {
                        Error::artifact(&entry.path, format!("no string column `{key}`"))
                    })?;
                let mask: BooleanArray = (0..col.len())
                    .map(|i| Some(col.is_valid(i) && keep(col.value(i))))
                    .collect();
                if mask.true_count() == 0 {
                    continue;
                }
                let kept = arrow::compute::filter_record_batch(&b, &mask)
                    .map_err(|e| Error::artifact(&entry.path, e))?;
                rows.extend(from_batch::<R>(&kept).map_err(|e| Error::artifact(&entry.path, e))?);
            }
        }
        Ok(rows)
    }

    /// Maps one Arrow IPC file into memory and decodes its batches in place (zero-copy). Only
    /// its size is checked against the manifest: hashing it would read every byte, which is what
    /// mapping avoids.
    pub fn map_ipc(&self, entry: &FileEntry) -> Result<Vec<RecordBatch>> {
        let path = self.root.join(&entry.path);
        let file = std::fs::File::open(&path).at(&path)?;
        let len = file.metadata().at(&path)?.len();
        if len != entry.bytes || len == 0 {
            return Err(Error::artifact(
                &path,
                "file does not match its manifest (size); re-run the stage with --force",
            ));
        }
        // SAFETY: committed artifact files are never written in place: writers create a new file
        // under a temporary name and rename it, and cleanup only unlinks, which leaves an existing
        // mapping valid.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        let ptr = std::ptr::NonNull::new(map.as_ptr() as *mut u8)
            .ok_or_else(|| Error::artifact(&path, "empty mapping"))?;
        let len = map.len();
        // SAFETY: `ptr` and `len` describe the mapping, which the buffer keeps alive.
        let buffer = unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(map)) };
        read_ipc(&path, &buffer)
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).at(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    {
        let mut f = std::fs::File::create(&tmp).at(&tmp)?;
        f.write_all(bytes).at(&tmp)?;
        f.sync_all().at(&tmp)?;
    }
    std::fs::rename(&tmp, path).at(path)
}

#[derive(Serialize, Deserialize)]
struct JournalHeader {
    fingerprint: String,
}

/// Writes one stage's files and commits its manifest. Partitions finished before a crash are
/// kept in a journal and reused by the next run with the same fingerprint.
pub struct StageWriter {
    store: Store,
    stage: String,
    fingerprint: String,
    previous: Vec<FileEntry>,
    journal_path: PathBuf,
    journal: std::fs::File,
    written: Vec<FileEntry>,
    reused: usize,
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
        let mut previous: Vec<FileEntry> = Vec::new();
        if reuse {
            previous = store.manifest(stage)?.map(|m| m.files).unwrap_or_default();
        }
        let journal_path = dir.join("journal.jsonl");
        if let (true, Ok(text)) = (reuse, std::fs::read_to_string(&journal_path)) {
            let mut lines = text.lines();
            let same = lines
                .next()
                .and_then(|l| serde_json::from_str::<JournalHeader>(l).ok())
                .is_some_and(|h| h.fingerprint == fingerprint);
            if same {
                // A torn last line (crash mid-write) simply fails to parse and is dropped.
                previous.extend(lines.filter_map(|l| serde_json::from_str::<FileEntry>(l).ok()));
            }
        }
        let mut journal = std::fs::File::create(&journal_path).at(&journal_path)?;
        let header = serde_json::to_string(&JournalHeader {
            fingerprint: fingerprint.to_string(),
        })
        .expect("header serializes");
        writeln!(journal, "{header}").at(&journal_path)?;
        Ok(StageWriter {
            store: store.clone(),
            stage: stage.to_string(),
            fingerprint: fingerprint.to_string(),
            previous,
            journal_path,
            journal,
            written: Vec::new(),
            reused: 0,
        })
    }

    /// Reuses an earlier file of `table`/`part` computed from the same `key`, if it is intact.
    pub fn reuse(&mut self, table: &str, part: &str, key: &str) -> Result<Option<FileEntry>> {
        let found = self
            .previous
            .iter()
            .rev()
            .find(|f| f.table == table && f.part == part && f.key == key)
            .cloned();
        let Some(entry) = found else { return Ok(None) };
        let path = self.store.root.join(&entry.path);
        match std::fs::metadata(&path) {
            Ok(m) if m.len() == entry.bytes => {
                self.record(entry.clone())?;
                self.reused += 1;
                Ok(Some(entry))
            }
            _ => Ok(None),
        }
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

    /// Writes rows as `table`/`part`.
    pub fn write<R: Row>(
        &mut self,
        table: &str,
        part: &str,
        key: &str,
        rows: &[R],
    ) -> Result<FileEntry> {
        let batch = crate::schema::to_batch(rows)?;
        self.write_batches(table, part, key, batch.schema(), &[batch])
    }

    /// Writes record batches as `table`/`part` (Parquet).
    pub fn write_batches(
        &mut self,
        table: &str,
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
        &self,
        table: &str,
        part: &str,
        key: &str,
        schema: SchemaRef,
        format: FileFormat,
    ) -> Result<PartWriter> {
        let dir = self.store.root.join(&self.stage).join(table);
        std::fs::create_dir_all(&dir).at(&dir)?;
        let tmp = dir.join(format!(".{}.tmp-{}", safe_name(part), std::process::id()));
        let file = std::fs::File::create(&tmp).at(&tmp)?;
        let sink = Hashing {
            inner: std::io::BufWriter::with_capacity(1 << 20, file),
            sha: Sha256::new(),
            bytes: 0,
        };
        let bad = |e: String| Error::artifact(&tmp, e);
        let sink = match format {
            FileFormat::Parquet => {
                let props = formats::writer_properties();
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
        file.sync_all().at(&tmp)?;
        drop(file);
        let sha = hex_of(&sha.finalize());
        let rel = format!(
            "{}/{table}/{}-{}.{}",
            self.stage,
            safe_name(&part),
            &sha[..12],
            format.extension()
        );
        let path = self.store.root.join(&rel);
        std::fs::rename(&tmp, &path).at(&path)?;
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
    pub fn scratch(&self, name: &str) -> Result<(PathBuf, FileEntry)> {
        let file = format!(".{}.tmp-{}", safe_name(name), std::process::id());
        let rel = format!("{}/{file}", self.stage);
        let path = self.store.root.join(&rel);
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
    pub fn entry(&self, table: &str, part: &str) -> Option<&FileEntry> {
        self.written
            .iter()
            .rev()
            .find(|f| f.table == table && f.part == part)
    }

    /// Number of partitions reused rather than recomputed.
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// Writes the manifest (last), removes the journal and any file the manifest does not list.
    pub fn commit(self, mut manifest: Manifest) -> Result<Manifest> {
        manifest.stage = self.stage.clone();
        manifest.fingerprint = self.fingerprint.clone();
        manifest.files = self.written;
        let path = self.store.manifest_path(&self.stage);
        let json = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
        write_atomic(&path, &json)?;
        drop(self.journal);
        let _ = std::fs::remove_file(&self.journal_path);
        let keep: BTreeSet<PathBuf> = manifest
            .files
            .iter()
            .map(|f| self.store.root.join(&f.path))
            .collect();
        remove_unlisted(&self.store.root.join(&self.stage), &keep)?;
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
    tmp: PathBuf,
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
}

/// A temporary file of ours (`.<name>.tmp-<pid>`) left by an interrupted write.
fn is_stale_temp(p: &Path) -> bool {
    p.file_name()
        .map(|n| n.to_string_lossy())
        .is_some_and(|n| n.starts_with('.') && n.contains(".tmp-"))
}

fn remove_unlisted(dir: &Path, keep: &BTreeSet<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).at(dir)? {
        let p = entry.at(dir)?.path();
        if p.is_dir() {
            remove_unlisted(&p, keep)?;
            let _ = std::fs::remove_dir(&p); // only succeeds when empty
        } else if (p
            .extension()
            .is_some_and(|e| e == "parquet" || e == "arrow")
            || is_stale_temp(&p))
            && !keep.contains(&p)
        {
            std::fs::remove_file(&p).at(&p)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ErrorRow;

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
        w.write("errors", "a", "ka", &rows(2)).unwrap();
        // Crash: no commit. Nothing is visible...
        drop(w);
        assert!(store.tables().unwrap().is_empty());
        // ...but a re-run with the same fingerprint reuses the finished partition.
        let mut w = StageWriter::begin(&store, "s", "fp1", true).unwrap();
        assert!(w.reuse("errors", "a", "ka").unwrap().is_some());
        assert!(w.reuse("errors", "a", "other-key").unwrap().is_none());
        w.write("errors", "b", "kb", &rows(3)).unwrap();
        let m = w.commit(manifest()).unwrap();
        assert_eq!(m.rows("errors"), 5);
        assert_eq!(store.read::<ErrorRow>("errors").unwrap().len(), 5);
        assert!(!dir.path().join("s/journal.jsonl").exists());
    }

    #[test]
    fn a_new_fingerprint_drops_the_journal_and_commit_collects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut w = StageWriter::begin(&store, "s", "fp1", true).unwrap();
        let first = w.write("errors", "a", "ka", &rows(1)).unwrap();
        drop(w);
        let mut w = StageWriter::begin(&store, "s", "fp2", true).unwrap();
        assert!(w.reuse("errors", "a", "ka").unwrap().is_none());
        w.write("errors", "a", "ka2", &rows(4)).unwrap();
        w.commit(manifest()).unwrap();
        assert!(
            !dir.path().join(&first.path).exists(),
            "unlisted file was removed"
        );
        assert_eq!(store.read::<ErrorRow>("errors").unwrap().len(), 4);
    }

    #[test]
    fn corrupted_files_are_reported_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let mut w = StageWriter::begin(&store, "s", "fp", true).unwrap();
        let e = w.write("errors", "a", "k", &rows(1)).unwrap();
        w.commit(manifest()).unwrap();
        let p = dir.path().join(&e.path);
        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n / 2] ^= 0xff;
        std::fs::write(&p, bytes).unwrap();
        let err = store.read::<ErrorRow>("errors").unwrap_err().to_string();
        assert!(err.contains(&e.path) && err.contains("checksum"), "{err}");
    }
}
