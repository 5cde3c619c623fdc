//! The only module that knows the disk layout: Parquet files written under a temporary name and
//! renamed, a per-stage journal for crash resume, and the JSON manifest written last. A file no
//! manifest lists does not exist to readers.
//!
//! Layout: `<output_dir>/<stage>/manifest.json` and `<output_dir>/<stage>/<table>/<part>-<sha12>.parquet`
//! (`.arrow` for tables stored as Arrow IPC files to be memory-mapped, such as `bm25_index`).

use crate::artifact::schema::{from_batch, Row, Table};
use crate::error::{Error, IoContext, Result};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::buffer::Buffer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A stage's manifest file name.
pub(crate) const MANIFEST: &str = "manifest.json";

mod atomic;
mod cache;
mod columns;
mod formats;
pub mod history;
mod location;
pub mod outcomes;
pub mod readers;
pub mod remote;
pub mod schema;
pub mod scope;
pub mod table;
mod writer;
pub use atomic::{pending, settle, sync_dir, temp_name, write_atomic};
pub use cache::VectorCache;
pub use formats::{encode_parquet, read_ipc, read_parquet_bytes, read_parquet_columns};
pub use location::{plain_name, RemoteUrl};
pub use writer::{discard_journal, retire, PartWriter, StageWriter};

/// The record of which pipeline wrote an output directory (`<output_dir>/run.json`).
pub const RUN_RECORD: &str = "run.json";

/// Bumped when an artifact's layout or meaning changes; part of every fingerprint.
/// 2: partition files never start with `_` or `.` ([`part_stem`]).
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format this version reads (1 differs from 2 only in partition file names, which
/// a run remakes).
pub const OLDEST_FORMAT: u32 = 1;

/// The directory under an output directory that shard outputs live in.
pub const SHARDS_DIR: &str = "shards";

/// Whether `name` is a shard's directory: `<i>-of-<n>` with `i < n`.
fn is_shard_dir(name: &str) -> bool {
    let Some((i, n)) = name.split_once("-of-") else {
        return false;
    };
    matches!((i.parse::<u32>(), n.parse::<u32>()), (Ok(i), Ok(n)) if i < n)
}

/// The committed files of `stage` in every shard under `root`, their paths made relative to
/// `root` (`shards/<i>-of-<n>/<stage>/…`). A shard whose manifest is missing offers nothing.
pub fn committed_files(root: &Path, stage: &str) -> Result<Vec<FileEntry>> {
    let dir = root.join(SHARDS_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_shard_dir(n))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let store = Store::new(dir.join(&name));
        if let Some(m) = store.manifest(stage)? {
            out.extend(m.files.into_iter().map(|mut f| {
                f.path = format!("{SHARDS_DIR}/{name}/{}", f.path);
                f
            }));
        }
    }
    Ok(out)
}

/// A manifest of a format this version reads, or an error naming it and who wrote it: an output
/// directory of another ri-batch is never read as if it were this one's.
fn check_format(path: &Path, m: Manifest) -> Result<Manifest> {
    let v = m.format_version;
    let who = if v > FORMAT_VERSION {
        "a newer"
    } else if v < OLDEST_FORMAT {
        "an older"
    } else {
        return Ok(m);
    };
    Err(Error::artifact(
        path,
        format!(
            "written by {who} ri-batch (version {}, artifact format {v}); this one ({}) reads \
             formats {OLDEST_FORMAT} to {FORMAT_VERSION}: run it with that version, or re-run \
             the pipeline into another output directory",
            m.tool_version,
            env!("CARGO_PKG_VERSION")
        ),
    ))
}

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

/// A repository name derived from a path: its last component without `.git`, with every other
/// character than letters, digits, `-`, `_`, `.` replaced by `_`.
pub fn name_from_path(p: &Path) -> String {
    let last = p
        .file_name()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let last = last.strip_suffix(".git").unwrap_or(&last);
    let mut name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !plain_name(&name) {
        name = format!("repo{}", name.replace('.', "_"));
    }
    name
}

/// The file-name stem of partition `part`: its [`safe_name`], after `part` when that would start
/// with `_` or `.`. Directory readers (pyarrow datasets, so pandas; Spark, Hive) skip such files as
/// hidden or metadata, and the `*` scope's safe name is `_`: its rows would silently vanish.
pub fn part_stem(part: &str) -> String {
    let name = safe_name(part);
    if name.starts_with(['_', '.']) {
        format!("part{name}")
    } else {
        name
    }
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_of(&Sha256::digest(bytes))
}

/// The SHA-256 of a file's contents, streamed (lowercase hex).
pub fn sha256_file(path: &std::path::Path) -> crate::error::Result<String> {
    use crate::error::IoContext;
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(path).at(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).at(path)?;
    Ok(hex_of(&h.finalize()))
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

/// A pipeline stage, by name: its directory under the output directory and its manifest. The
/// one list of stages and their run order; `--stages` takes these names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum StageId {
    Scan,
    Chunk,
    Questions,
    Embed,
    Index,
    Retrieve,
    Pack,
    Extract,
    Evaluate,
}

impl StageId {
    /// Every stage, in run order.
    pub const ALL: [StageId; 9] = [
        StageId::Scan,
        StageId::Chunk,
        StageId::Questions,
        StageId::Embed,
        StageId::Index,
        StageId::Retrieve,
        StageId::Pack,
        StageId::Extract,
        StageId::Evaluate,
    ];

    /// The stage's name: its directory and its manifest's `stage`.
    pub fn name(self) -> &'static str {
        match self {
            StageId::Scan => "scan",
            StageId::Chunk => "chunk",
            StageId::Questions => "questions",
            StageId::Embed => "embed",
            StageId::Index => "index",
            StageId::Retrieve => "retrieve",
            StageId::Pack => "pack",
            StageId::Extract => "extract",
            StageId::Evaluate => "evaluate",
        }
    }
}

impl AsRef<str> for StageId {
    fn as_ref(&self) -> &str {
        self.name()
    }
}

impl std::fmt::Display for StageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
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
    /// Whether this file belongs to `table`.
    pub fn is(&self, table: Table) -> bool {
        self.table == table.name()
    }

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
    pub fn rows(&self, table: Table) -> u64 {
        self.files
            .iter()
            .filter(|f| f.is(table))
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
    /// The scope partition `f` is of (its name), or an error naming the file.
    pub fn part_scope(&self, f: &FileEntry) -> Result<scope::Scope> {
        f.part
            .parse()
            .map_err(|e| Error::artifact(self.root().join(&f.path), e))
    }

    pub fn new(root: impl Into<PathBuf>) -> Store {
        Store { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `rel` (a path from a manifest or journal) under this output directory, checked to stay
    /// inside it: relative, and made only of plain components (no `..`, no root, no prefix).
    pub fn inside(&self, rel: &str) -> Result<PathBuf> {
        let p = Path::new(rel);
        let plain = !rel.is_empty()
            && p.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain {
            return Err(Error::artifact(
                &self.root,
                format!("refusing the path `{rel}`: it leaves the output directory"),
            ));
        }
        Ok(self.root.join(p))
    }

    /// The absolute path of a committed file, checked to lie inside this output directory.
    pub fn path_of(&self, entry: &FileEntry) -> Result<PathBuf> {
        self.inside(&entry.path)
    }

    /// Where the manifest of `stage` lives.
    pub fn manifest_path(&self, stage: &str) -> PathBuf {
        self.root.join(stage).join(MANIFEST)
    }

    /// The committed manifest of `stage`, if any.
    pub fn manifest(&self, stage: impl AsRef<str>) -> Result<Option<Manifest>> {
        let stage = stage.as_ref();
        let p = self.manifest_path(stage);
        match std::fs::read(&p) {
            // A manifest that does not parse (emptied, truncated by hand, from a foreign tool)
            // commits nothing: the stage is treated as never run, and reruns.
            Ok(bytes) => match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) => check_format(&p, m).map(Some),
                Err(e) => {
                    eprintln!(
                        "warning: {}: unreadable manifest ({e}); treating the stage `{stage}` as not run",
                        p.display()
                    );
                    Ok(None)
                }
            },
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

    /// Every table and the entries of its files, across all committed manifests.
    pub fn tables(&self) -> Result<BTreeMap<String, Vec<FileEntry>>> {
        let mut out: BTreeMap<String, Vec<FileEntry>> = BTreeMap::new();
        for m in self.manifests()?.values() {
            for f in &m.files {
                out.entry(f.table.clone()).or_default().push(f.clone());
            }
        }
        Ok(out)
    }

    /// Checks one committed file against its manifest entry, reading it in a stream: its size
    /// and, with `checksum`, its SHA-256. The error names the file.
    pub fn verify(&self, entry: &FileEntry, checksum: bool) -> Result<PathBuf> {
        let path = self.path_of(entry)?;
        // A committed file that is gone is a damaged store (exit 3), not a wrong argument.
        let mut file = std::fs::File::open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::artifact(
                    &path,
                    "listed in its stage's manifest but missing: the output directory was changed or removed while in use",
                )
            } else {
                Error::io(&path, e)
            }
        })?;
        let md = file.metadata().at(&path)?;
        let mismatch = |what: &str| mismatch(&path, what);
        if md.len() != entry.bytes {
            return Err(mismatch("size"));
        }
        if checksum {
            let seen = Verified::of(&path, &md, &entry.sha256);
            if !seen.known() {
                let mut sha = Sha256::new();
                std::io::copy(&mut file, &mut sha).at(&path)?;
                if hex_of(&sha.finalize()) != entry.sha256 {
                    return Err(mismatch("checksum"));
                }
                seen.remember();
            }
        }
        Ok(path)
    }

    /// The committed files of `table`, from whichever stage wrote it.
    pub fn files_of(&self, table: Table) -> Result<Vec<FileEntry>> {
        let mut out = Vec::new();
        for m in self.manifests()?.values() {
            out.extend(m.files.iter().filter(|f| f.is(table)).cloned());
        }
        Ok(out)
    }

    /// Reads the named columns of one file (all when `None`), checking its size and checksum.
    pub fn read_columns(
        &self,
        entry: &FileEntry,
        columns: Option<&[&str]>,
    ) -> Result<Vec<RecordBatch>> {
        let (path, bytes) = self.read_checked(entry)?;
        match entry.format() {
            FileFormat::Parquet => read_parquet_columns(&path, bytes::Bytes::from(bytes), columns),
            FileFormat::ArrowIpc => read_ipc(&path, &Buffer::from_vec(bytes)),
        }
    }

    /// Hands the rows of one file to `each` as `R`, `batch_rows` at a time, decoding only
    /// `columns` (all when `None`), after checking the file's size and checksum: memory follows
    /// one batch of rows, not the file.
    pub fn for_each_rows<R: serde::de::DeserializeOwned>(
        &self,
        entry: &FileEntry,
        columns: Option<&[&str]>,
        batch_rows: usize,
        mut each: impl FnMut(Vec<R>) -> Result<()>,
    ) -> Result<()> {
        if entry.format() != FileFormat::Parquet {
            for b in self.read_columns(entry, columns)? {
                each(from_batch::<R>(&b).map_err(|e| Error::artifact(&entry.path, e))?)?;
            }
            return Ok(());
        }
        // Checked in a stream, then read a row group's column chunks at a time from the file.
        let path = self.verify(entry, true)?;
        let file = std::fs::File::open(&path).at(&path)?;
        let batches = formats::parquet_batches(&path, file, columns, batch_rows)?;
        for b in batches {
            let b = b.map_err(|e| Error::artifact(&path, e))?;
            each(from_batch::<R>(&b).map_err(|e| Error::artifact(&entry.path, e))?)?;
        }
        Ok(())
    }

    /// The bytes of one committed file, checked against its manifest's size and checksum.
    fn read_checked(&self, entry: &FileEntry) -> Result<(PathBuf, Vec<u8>)> {
        let path = self.path_of(entry)?;
        let bytes = std::fs::read(&path).at(&path)?;
        if bytes.len() as u64 != entry.bytes || sha256_hex(&bytes) != entry.sha256 {
            return Err(mismatch(&path, "size or checksum"));
        }
        Ok((path, bytes))
    }

    /// Reads every row of `R`'s table.
    pub fn read<R: Row>(&self) -> Result<Vec<R>> {
        self.read_as(R::TABLE)
    }

    /// Reads every row of `table` into `R` (a projection of its rows, or a row type that more
    /// than one table holds).
    pub fn read_as<R: serde::de::DeserializeOwned>(&self, table: Table) -> Result<Vec<R>> {
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

    /// The rows of the files `files` (of one table) whose string column `key` passes `keep`, one
    /// file at a time: the key column is decoded first, then only the kept rows' pages of
    /// `columns`. Memory follows the rows kept, not the table; each file's checksum is checked.
    pub fn read_where<R: serde::de::DeserializeOwned>(
        &self,
        files: &[&FileEntry],
        columns: &[&str],
        key: &str,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<R>> {
        let mut rows = Vec::new();
        for &entry in files {
            let path = self.verify(entry, true)?;
            let file = std::fs::File::open(&path).at(&path)?;
            let mut positions = Vec::new();
            let mut at = 0u32;
            for b in formats::parquet_batches(&path, file, Some(&[key]), 8192)? {
                let b = b.map_err(|e| Error::artifact(&path, e))?;
                let col = b.column(0).as_string_opt::<i32>().ok_or_else(|| {
                    Error::artifact(&entry.path, format!("no string column `{key}`"))
                })?;
                for i in 0..col.len() {
                    if col.is_valid(i) && keep(col.value(i)) {
                        positions.push(at + i as u32);
                    }
                }
                at += b.num_rows() as u32;
            }
            if positions.is_empty() {
                continue;
            }
            for b in formats::read_parquet_rows(&path, &positions, at as usize, columns)? {
                rows.extend(from_batch::<R>(&b).map_err(|e| Error::artifact(&entry.path, e))?);
            }
        }
        Ok(rows)
    }

    /// The rows at the given positions (ascending) of one Parquet file, decoding only `columns`
    /// and the pages that hold them. The whole file is checked against its manifest's checksum
    /// the first time this process reads it (see [`Verified`]); later reads of the unchanged file
    /// cost only the rows asked for.
    pub fn read_rows_at<R: serde::de::DeserializeOwned>(
        &self,
        entry: &FileEntry,
        rows: &[u32],
        columns: &[&str],
    ) -> Result<Vec<R>> {
        let path = self.verify(entry, true)?;
        let mut out = Vec::with_capacity(rows.len());
        for b in formats::read_parquet_rows(&path, rows, entry.rows as usize, columns)? {
            out.extend(from_batch::<R>(&b).map_err(|e| Error::artifact(&entry.path, e))?);
        }
        Ok(out)
    }

    /// Maps one Arrow IPC file into memory and decodes its batches in place (zero-copy). The
    /// mapped bytes are checked against the manifest's checksum the first time this process maps
    /// the file (see [`Verified`]): a changed index is an error, never a different ranking.
    pub fn map_ipc(&self, entry: &FileEntry) -> Result<Vec<RecordBatch>> {
        let path = self.path_of(entry)?;
        let file = std::fs::File::open(&path).at(&path)?;
        let md = file.metadata().at(&path)?;
        let len = md.len();
        if len != entry.bytes || len == 0 {
            return Err(mismatch(&path, "size"));
        }
        let seen = Verified::of(&path, &md, &entry.sha256);
        // SAFETY: committed artifact files are never written in place: writers create a new file
        // under a temporary name and rename it, and cleanup only unlinks, which leaves an existing
        // mapping valid.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        // A scratch segment of the running stage (no table, no checksum yet) is its own writing.
        let scratch = entry.table.is_empty() && entry.sha256.is_empty();
        if !scratch && !seen.known() {
            if sha256_hex(&map) != entry.sha256 {
                return Err(mismatch(&path, "checksum"));
            }
            seen.remember();
        }
        let ptr = std::ptr::NonNull::new(map.as_ptr() as *mut u8)
            .ok_or_else(|| Error::artifact(&path, "empty mapping"))?;
        let len = map.len();
        // SAFETY: `ptr` and `len` describe the mapping, which the buffer keeps alive.
        let buffer = unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(map)) };
        read_ipc(&path, &buffer)
    }
}

/// A committed file this process has checked against its manifest's checksum, known by its path,
/// identity and modification time: readers that map a file or read a few of its rows (the BM25
/// index of every query, a hit's chunk row) hash it once per process, not once per read. A file
/// replaced or touched since is checked again.
pub struct Verified {
    key: VerifiedKey,
}

/// What a checked file is known by: path, size, inode, modification time (ns), checksum.
type VerifiedKey = (PathBuf, u64, u64, i128, String);

impl Verified {
    fn set() -> &'static std::sync::Mutex<std::collections::HashSet<VerifiedKey>> {
        static SET: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<VerifiedKey>>> =
            std::sync::OnceLock::new();
        SET.get_or_init(Default::default)
    }

    fn of(path: &Path, md: &std::fs::Metadata, sha256: &str) -> Verified {
        use std::os::unix::fs::MetadataExt;
        let mtime = md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128;
        Verified {
            key: (
                path.to_path_buf(),
                md.len(),
                md.ino(),
                mtime,
                sha256.to_string(),
            ),
        }
    }

    fn known(&self) -> bool {
        Verified::set().lock().is_ok_and(|s| s.contains(&self.key))
    }

    fn remember(self) {
        if let Ok(mut s) = Verified::set().lock() {
            s.insert(self.key);
        }
    }
}

/// The error for a committed file whose `what` (size, checksum) differs from its manifest.
fn mismatch(path: &Path, what: &str) -> Error {
    Error::artifact(
        path,
        format!("file does not match its manifest ({what}); re-run the stage with --force"),
    )
}
