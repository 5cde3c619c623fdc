//! The only module that knows the disk layout: Parquet files written under a temporary name and
//! renamed, a per-stage journal for crash resume, and the JSON manifest written last. A file no
//! manifest lists does not exist to readers.
//!
//! Layout: `<output_dir>/<stage>/manifest.json` and `<output_dir>/<stage>/<table>/<part>-<sha12>.parquet`.

use crate::error::{Error, IoContext, Result};
use crate::schema::{from_batch, Row};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

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
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push_str(&format!("{b:02x}"));
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

    /// Reads one file, checking its size and checksum against the manifest.
    pub fn read_batches(&self, entry: &FileEntry) -> Result<Vec<RecordBatch>> {
        let path = self.root.join(&entry.path);
        let bytes = std::fs::read(&path).at(&path)?;
        if bytes.len() as u64 != entry.bytes || sha256_hex(&bytes) != entry.sha256 {
            return Err(Error::artifact(&path, "file does not match its manifest (size or checksum); re-run the stage with --force"));
        }
        read_parquet_bytes(&path, bytes::Bytes::from(bytes))
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
        let mut rows = Vec::new();
        for b in self.read_batches(entry)? {
            rows.extend(from_batch::<R>(&b).map_err(|e| Error::artifact(&entry.path, e))?);
        }
        Ok(rows)
    }
}

/// Parses Parquet bytes into record batches.
pub fn read_parquet_bytes(path: &Path, bytes: bytes::Bytes) -> Result<Vec<RecordBatch>> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .and_then(|b| b.with_batch_size(8192).build())
        .map_err(|e| Error::artifact(path, e))?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::artifact(path, e))
}

/// Encodes batches as one Parquet file in memory.
pub fn encode_parquet(schema: SchemaRef, batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema, Some(props))
        .map_err(|e| Error::Invalid(e.to_string()))?;
    for b in batches {
        w.write(b).map_err(|e| Error::Invalid(e.to_string()))?;
    }
    w.close().map_err(|e| Error::Invalid(e.to_string()))?;
    Ok(buf)
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

    /// Writes record batches as `table`/`part`.
    pub fn write_batches(
        &mut self,
        table: &str,
        part: &str,
        key: &str,
        schema: SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<FileEntry> {
        let bytes = encode_parquet(schema, batches)?;
        let sha = sha256_hex(&bytes);
        let safe_part = safe_name(part);
        let rel = format!("{}/{table}/{safe_part}-{}.parquet", self.stage, &sha[..12]);
        write_atomic(&self.store.root.join(&rel), &bytes)?;
        let entry = FileEntry {
            table: table.to_string(),
            path: rel,
            part: part.to_string(),
            key: key.to_string(),
            rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
            bytes: bytes.len() as u64,
            sha256: sha,
        };
        self.record(entry.clone())?;
        Ok(entry)
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

fn remove_unlisted(dir: &Path, keep: &BTreeSet<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).at(dir)? {
        let p = entry.at(dir)?.path();
        if p.is_dir() {
            remove_unlisted(&p, keep)?;
            let _ = std::fs::remove_dir(&p); // only succeeds when empty
        } else if p.extension().is_some_and(|e| e == "parquet") && !keep.contains(&p) {
            std::fs::remove_file(&p).at(&p)?;
        }
    }
    Ok(())
}

/// The embedding cache: vectors keyed by the hash of the exact text embedded, one directory per
/// (model id, dims), shared by every run and pipeline. Each batch of new vectors is one Parquet
/// part written atomically, so a crash loses at most the batch in flight and a re-run resumes.
pub struct VectorCache {
    dir: PathBuf,
    model: String,
    dims: usize,
    map: std::collections::HashMap<String, Vec<f32>>,
}

impl VectorCache {
    /// Opens (creating) the cache of `model` at `dims` under `root`. Unreadable parts are dropped.
    pub fn open(root: &Path, model: &str, dims: usize) -> Result<VectorCache> {
        let safe = safe_name(model);
        let dir = root.join(format!("{safe}-d{dims}"));
        std::fs::create_dir_all(&dir).at(&dir)?;
        let mut map = std::collections::HashMap::new();
        for entry in std::fs::read_dir(&dir).at(&dir)? {
            let p = entry.at(&dir)?.path();
            if p.extension().is_none_or(|e| e != "parquet") {
                continue;
            }
            let bytes = std::fs::read(&p).at(&p)?;
            let rows = read_parquet_bytes(&p, bytes::Bytes::from(bytes)).and_then(|bs| {
                bs.iter()
                    .map(from_batch::<crate::schema::EmbeddingRow>)
                    .collect::<Result<Vec<_>>>()
            });
            match rows {
                Ok(rows) => {
                    for r in rows.into_iter().flatten() {
                        if r.vector.len() == dims {
                            map.insert(r.text_hash, r.vector);
                        }
                    }
                }
                Err(_) => {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        Ok(VectorCache {
            dir,
            model: model.to_string(),
            dims,
            map,
        })
    }

    pub fn get(&self, text_hash: &str) -> Option<&Vec<f32>> {
        self.map.get(text_hash)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds vectors and persists them as one new part.
    pub fn append(&mut self, items: Vec<(String, Vec<f32>)>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let rows: Vec<crate::schema::EmbeddingRow> = items
            .iter()
            .map(|(h, v)| crate::schema::EmbeddingRow {
                id: h.clone(),
                text_hash: h.clone(),
                model: self.model.clone(),
                vector: v.clone(),
            })
            .collect();
        let batch =
            crate::schema::to_batch_with(&crate::schema::embedding_fields(self.dims), &rows)?;
        let bytes = encode_parquet(batch.schema(), &[batch])?;
        let path = self
            .dir
            .join(format!("part-{}.parquet", &sha256_hex(&bytes)[..16]));
        write_atomic(&path, &bytes)?;
        self.map.extend(items);
        Ok(())
    }
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
    fn vector_cache_persists_across_opens_and_keys_by_dims() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = VectorCache::open(dir.path(), "m@1", 2).unwrap();
        assert!(c.is_empty());
        c.append(vec![
            ("h1".into(), vec![0.6, 0.8]),
            ("h2".into(), vec![1.0, 0.0]),
        ])
        .unwrap();
        let c = VectorCache::open(dir.path(), "m@1", 2).unwrap();
        assert_eq!(c.get("h1"), Some(&vec![0.6, 0.8]));
        assert_eq!(c.len(), 2);
        assert!(VectorCache::open(dir.path(), "m@1", 3).unwrap().is_empty());
        assert!(VectorCache::open(dir.path(), "m@2", 2).unwrap().is_empty());
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
