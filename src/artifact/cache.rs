//! The embedding cache: vectors keyed by the hash of the exact text embedded, one directory per
//! (model id, dims), shared by every run and pipeline. Each batch of new vectors is one Parquet
//! part written atomically, so a crash loses at most the batch in flight and a re-run resumes.
//! Opening reads only the hashes (which part, which row); vectors are read when asked for, one
//! part at a time, so memory follows what a partition needs. Many small parts are compacted.

use super::formats::{encode_parquet, read_parquet_columns, read_parquet_rows};
use super::{safe_name, sha256_hex, write_atomic};
use crate::artifact::schema::{embedding_fields, from_batch, to_batch_with, EmbeddingRow};
use crate::error::{Error, IoContext, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Parts smaller than this are merged when there are more than [`COMPACT_AFTER`] of them.
const SMALL_PART: usize = 4096;
const COMPACT_AFTER: usize = 64;
/// Rows per compacted part.
const COMPACT_ROWS: usize = 16384;
/// The names of the parts compaction removed, one per line: the mirror of a cache on object
/// storage neither fetches them again nor keeps them in the bucket.
const COMPACTED: &str = ".compacted";

#[derive(serde::Deserialize)]
struct HashOnly {
    text_hash: String,
}

#[derive(serde::Deserialize)]
struct HashVector {
    text_hash: String,
    vector: Vec<f32>,
}

/// The cache of one model at one width.
pub struct VectorCache {
    dir: PathBuf,
    model: String,
    dims: usize,
    parts: Vec<PathBuf>,
    /// Rows of each part.
    rows: Vec<usize>,
    /// Text hash → (part number, row in the part).
    index: HashMap<String, (u32, u32)>,
    /// A shared lock on the cache, held while it is open: processes that share a cache (shards
    /// of one run, pipelines run side by side) read and append at once, and compaction, which
    /// removes parts, happens only under the exclusive lock, when no other process has it open.
    _lock: std::fs::File,
}

/// Reads the named columns of one part, after checking its bytes against its name: a part is
/// named after the SHA-256 of its bytes (`part-<first 16 hex>.parquet`), so a part changed on
/// disk is an error (and, at open, a part dropped: its vectors are embedded again), never a
/// different vector.
fn read_part<R: serde::de::DeserializeOwned>(p: &Path, columns: &[&str]) -> Result<Vec<R>> {
    let bytes = std::fs::read(p).at(p)?;
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let want = name
        .strip_prefix("part-")
        .and_then(|n| n.strip_suffix(".parquet"))
        .unwrap_or("");
    if want.len() != 16 || !sha256_hex(&bytes).starts_with(want) {
        return Err(Error::artifact(
            p,
            "cache part does not match its name's checksum: dropped, its vectors are embedded again",
        ));
    }
    let batches = read_parquet_columns(p, bytes::Bytes::from(bytes), Some(columns))?;
    let mut rows = Vec::new();
    for b in &batches {
        rows.extend(from_batch::<R>(b)?);
    }
    Ok(rows)
}

/// The given rows (ascending) of one part: the file is mapped and only the pages holding them are
/// decoded, so a lookup costs what it asks for, not the part's size. Cache parts are written under
/// a temporary name and renamed, never changed in place.
fn read_rows(p: &Path, rows: &[u32], total: usize) -> Result<Vec<HashVector>> {
    let mut out = Vec::with_capacity(rows.len());
    for b in read_parquet_rows(p, rows, total, &["text_hash", "vector"])? {
        out.extend(from_batch::<HashVector>(&b)?);
    }
    Ok(out)
}

impl VectorCache {
    /// Opens (creating) the cache of `model` at `dims` under `root`. Unreadable parts are dropped.
    pub fn open(root: &Path, model: &str, dims: usize) -> Result<VectorCache> {
        let dir = root.join(VectorCache::dir_name(model, dims));
        std::fs::create_dir_all(&dir).at(&dir)?;
        let lock_path = dir.join(".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .at(&lock_path)?;
        let mut c = VectorCache {
            dir,
            model: model.to_string(),
            dims,
            parts: Vec::new(),
            rows: Vec::new(),
            index: HashMap::new(),
            _lock: lock,
        };
        // Alone with the cache: compact it if it needs it.
        if c._lock.try_lock().is_ok() {
            let sizes = c.load()?;
            let small = sizes.iter().filter(|&&n| n < SMALL_PART).count();
            if small > COMPACT_AFTER {
                c.compact(&sizes)?;
            }
            c.parts.clear();
            c.rows.clear();
            c.index.clear();
            c._lock.unlock().at(&lock_path)?;
        }
        // Then the parts are read under the shared lock, which no compaction can take from us.
        c._lock.lock_shared().at(&lock_path)?;
        c.load()?;
        Ok(c)
    }

    /// The directory (under the cache root) of `model` at `dims`.
    pub fn dir_name(model: &str, dims: usize) -> String {
        format!("{}-d{dims}", safe_name(model))
    }

    /// The parts compaction has removed from the cache directory `dir`.
    pub fn compacted(dir: &Path) -> std::collections::HashSet<String> {
        std::fs::read_to_string(dir.join(COMPACTED))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// Records `parts` as compacted away (before they are removed).
    fn tombstone(&self, parts: &[&PathBuf]) -> Result<()> {
        use std::io::Write;
        let path = self.dir.join(COMPACTED);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .at(&path)?;
        for p in parts {
            if let Some(name) = p.file_name() {
                writeln!(f, "{}", name.to_string_lossy()).at(&path)?;
            }
        }
        f.sync_all().at(&path)
    }

    /// Reads every part's hashes; returns the row count of each part.
    fn load(&mut self) -> Result<Vec<usize>> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .at(&self.dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
            .collect();
        files.sort();
        let mut sizes = Vec::new();
        for p in files {
            match read_part::<HashOnly>(&p, &["text_hash"]) {
                Ok(rows) => {
                    let n = self.parts.len() as u32;
                    sizes.push(rows.len());
                    self.rows.push(rows.len());
                    for (i, r) in rows.into_iter().enumerate() {
                        self.index.insert(r.text_hash, (n, i as u32));
                    }
                    self.parts.push(p);
                }
                Err(_) => {
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        Ok(sizes)
    }

    /// Merges the small parts into parts of [`COMPACT_ROWS`]: each new part is written before the
    /// parts it replaces are removed, so a crash leaves at most duplicates, never a loss.
    fn compact(&mut self, sizes: &[usize]) -> Result<()> {
        let small: Vec<&PathBuf> = self
            .parts
            .iter()
            .zip(sizes)
            .filter(|(_, &n)| n < SMALL_PART)
            .map(|(p, _)| p)
            .collect();
        let mut pending: Vec<(String, Vec<f32>)> = Vec::new();
        let mut done: Vec<&PathBuf> = Vec::new();
        for p in small {
            let rows: Vec<HashVector> = read_part(p, &["text_hash", "vector"])?;
            pending.extend(rows.into_iter().map(|r| (r.text_hash, r.vector)));
            done.push(p);
            if pending.len() >= COMPACT_ROWS {
                self.write_part(&std::mem::take(&mut pending))?;
                self.tombstone(&done)?;
                for d in done.drain(..) {
                    std::fs::remove_file(d).at(d)?;
                }
            }
        }
        if !pending.is_empty() {
            self.write_part(&pending)?;
        }
        self.tombstone(&done)?;
        for d in done {
            std::fs::remove_file(d).at(d)?;
        }
        Ok(())
    }

    fn write_part(&self, items: &[(String, Vec<f32>)]) -> Result<PathBuf> {
        let rows: Vec<EmbeddingRow> = items
            .iter()
            .map(|(h, v)| EmbeddingRow {
                id: h.clone(),
                text_hash: h.clone(),
                model: self.model.clone(),
                vector: v.clone(),
            })
            .collect();
        let batch = to_batch_with(&embedding_fields(self.dims), &rows)?;
        let bytes = encode_parquet(batch.schema(), &[batch])?;
        let path = self
            .dir
            .join(format!("part-{}.parquet", &sha256_hex(&bytes)[..16]));
        write_atomic(&path, &bytes)?;
        Ok(path)
    }

    /// Whether the vector of `text_hash` is cached.
    pub fn contains(&self, text_hash: &str) -> bool {
        self.index.contains_key(text_hash)
    }

    /// The vectors of `hashes`, in order; reads each part that holds any of them once.
    pub fn get_many(&self, hashes: &[String]) -> Result<Vec<Vec<f32>>> {
        let mut by_part: BTreeMap<u32, Vec<(usize, u32)>> = BTreeMap::new();
        for (i, h) in hashes.iter().enumerate() {
            let &(part, row) = self.index.get(h).ok_or_else(|| {
                Error::artifact(&self.dir, format!("vector {h} is not in the cache"))
            })?;
            by_part.entry(part).or_default().push((i, row));
        }
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); hashes.len()];
        for (part, mut wanted) in by_part {
            let p = &self.parts[part as usize];
            wanted.sort_by_key(|&(_, row)| row);
            let mut rows: Vec<u32> = wanted.iter().map(|&(_, r)| r).collect();
            rows.dedup();
            let got = read_rows(p, &rows, self.rows[part as usize])?;
            for (i, row) in wanted {
                let at = rows.binary_search(&row).expect("selected");
                let r = got
                    .get(at)
                    .filter(|r| r.text_hash == hashes[i] && r.vector.len() == self.dims)
                    .ok_or_else(|| Error::artifact(p, "cache part changed while in use"))?;
                out[i] = r.vector.clone();
            }
        }
        Ok(out)
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Adds vectors and persists them as one new part.
    pub fn append(&mut self, items: Vec<(String, Vec<f32>)>) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let path = self.write_part(&items)?;
        let n = self.parts.len() as u32;
        self.parts.push(path);
        self.rows.push(items.len());
        for (i, (h, _)) in items.into_iter().enumerate() {
            self.index.insert(h, (n, i as u32));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            c.get_many(&["h2".into(), "h1".into()]).unwrap(),
            vec![vec![1.0, 0.0], vec![0.6, 0.8]]
        );
        assert_eq!(c.len(), 2);
        assert!(c.get_many(&["h3".into()]).is_err());
        assert!(VectorCache::open(dir.path(), "m@1", 3).unwrap().is_empty());
        assert!(VectorCache::open(dir.path(), "m@2", 2).unwrap().is_empty());
    }

    #[test]
    fn a_changed_part_is_dropped_and_its_vectors_are_missing_not_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = VectorCache::open(dir.path(), "m", 4).unwrap();
        c.append(vec![
            ("h1".into(), vec![0.5, 0.5, 0.5, 0.5]),
            ("h2".into(), vec![1.0, 0.0, 0.0, 0.0]),
        ])
        .unwrap();
        drop(c);
        let sub = dir.path().join("m-d4");
        let part = std::fs::read_dir(&sub)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "parquet"))
            .unwrap();
        // Bytes flipped, size unchanged.
        let mut bytes = std::fs::read(&part).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        bytes[mid + 1] ^= 0x40;
        std::fs::write(&part, &bytes).unwrap();
        let c = VectorCache::open(dir.path(), "m", 4).unwrap();
        assert!(!c.contains("h1") && !c.contains("h2"));
        assert!(!part.exists(), "dropped: its vectors are embedded again");
    }

    #[test]
    fn many_small_parts_are_compacted_without_losing_a_vector() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = VectorCache::open(dir.path(), "m", 2).unwrap();
        for i in 0..(COMPACT_AFTER + 6) {
            c.append(vec![(format!("h{i}"), vec![i as f32, 1.0])])
                .unwrap();
        }
        let parts = |d: &Path| {
            std::fs::read_dir(d)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "parquet")
                })
                .count()
        };
        let sub = dir.path().join("m-d2");
        assert_eq!(parts(&sub), COMPACT_AFTER + 6);
        // Another holder (a shard running beside this one) keeps every part in place.
        let other = VectorCache::open(dir.path(), "m", 2).unwrap();
        assert_eq!(
            parts(&sub),
            COMPACT_AFTER + 6,
            "no compaction under a reader"
        );
        assert_eq!(other.len(), COMPACT_AFTER + 6);
        drop((c, other));
        let c = VectorCache::open(dir.path(), "m", 2).unwrap();
        assert_eq!(parts(&sub), 1, "compacted into one part");
        assert_eq!(
            VectorCache::compacted(&sub).len(),
            COMPACT_AFTER + 6,
            "every removed part is recorded, so a mirror neither fetches nor keeps it"
        );
        let hashes: Vec<String> = (0..COMPACT_AFTER + 6).map(|i| format!("h{i}")).collect();
        let got = c.get_many(&hashes).unwrap();
        for (i, v) in got.iter().enumerate() {
            assert_eq!(v, &vec![i as f32, 1.0]);
        }
    }
}
