//! Artifacts on S3-compatible object storage. An `s3://bucket/prefix` output directory (or
//! embedding cache) is worked on in a local mirror and published object by object, keeping the
//! manifest-last rule without renames: a stage's data objects first, its manifest last, then every
//! object under the stage that the manifest does not list is deleted. Readers of the bucket trust
//! only what a manifest lists, exactly as readers of a local directory do. Credentials, region and
//! endpoint come from the standard AWS environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...).

use super::{write_atomic, Manifest, RemoteUrl, Store, MANIFEST};
use crate::error::{because, Cause, Error, IoContext, Result};
use futures::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Objects moved at once.
const IN_FLIGHT: usize = 8;
/// Files above this size are uploaded in parts of this size (memory stays bounded).
const PART_BYTES: usize = 8 << 20;

/// What a pull or push moved.
#[derive(Debug, Default, Clone, Copy)]
pub struct SyncStats {
    /// Manifests fetched or published.
    pub manifests: usize,
    /// Objects downloaded or uploaded.
    pub objects: usize,
    pub bytes: u64,
    /// Objects copied inside the bucket (the same content already there, e.g. a shard's file).
    pub copied: usize,
    pub deleted: usize,
}

impl SyncStats {
    fn add(&mut self, o: SyncStats) {
        self.manifests += o.manifests;
        self.objects += o.objects;
        self.bytes += o.bytes;
        self.copied += o.copied;
        self.deleted += o.deleted;
    }

    /// Whether anything moved.
    pub fn is_empty(&self) -> bool {
        self.manifests + self.objects + self.copied + self.deleted == 0
    }
}

impl std::fmt::Display for SyncStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} manifests, {} objects ({:.1} MB), {} copied in the bucket, {} deleted",
            self.manifests,
            self.objects,
            self.bytes as f64 / 1e6,
            self.copied,
            self.deleted
        )
    }
}

/// The S3 client of a bucket, configured from the environment.
pub fn object_store(bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    let s3 = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .map_err(|e| {
            Error::remote(
                format!("s3://{bucket}"),
                because("cannot configure the S3 client (AWS_* environment)", e),
            )
        })?;
    Ok(Arc::new(s3))
}

/// Reads `key`, or `None` when there is no such object.
pub async fn get_optional(
    store: &dyn ObjectStore,
    url: &RemoteUrl,
    key: &Key,
) -> Result<Option<bytes::Bytes>> {
    match store.get(key).await {
        Ok(r) => Ok(Some(r.bytes().await.map_err(|e| remote_err(url, key, e))?)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(remote_err(url, key, e)),
    }
}

/// The manifests of the stages committed at `url` (its top level, as a reader of a local output
/// directory sees it), each checked against the bucket: every file it lists is there, with its
/// size. The file paths stay relative to `url`.
pub async fn committed(store: &dyn ObjectStore, url: &RemoteUrl) -> Result<Vec<Manifest>> {
    let root = Key::from(url.prefix.as_str());
    let listing = store
        .list_with_delimiter(Some(&root))
        .await
        .map_err(|e| remote_err(url, &root, e))?;
    let sizes: HashMap<String, u64> = store
        .list(Some(&root))
        .map_ok(|m| (m.location.to_string(), m.size))
        .try_collect()
        .await
        .map_err(|e| remote_err(url, &root, e))?;
    let mut out = Vec::new();
    for dir in listing.common_prefixes {
        let key = dir.join(MANIFEST);
        let Some(bytes) = get_optional(store, url, &key).await? else {
            continue;
        };
        let m: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| remote_err(url, &key, format!("not a stage manifest: {e}")))?;
        for f in &m.files {
            let object = url.join(&f.path);
            if sizes.get(&object.prefix) != Some(&f.bytes) {
                return Err(Error::remote(
                    object.to_string(),
                    format!(
                        "missing or changed: {key} lists it with {} bytes, the bucket has {:?}",
                        f.bytes,
                        sizes.get(&object.prefix)
                    ),
                ));
            }
        }
        out.push(m);
    }
    Ok(out)
}

fn remote_err(url: &RemoteUrl, key: &Key, e: impl Into<Cause>) -> Error {
    Error::remote(format!("s3://{}/{key}", url.bucket), e)
}

/// One `s3://bucket/prefix` and the runtime its transfers run on.
pub struct Remote {
    url: RemoteUrl,
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
    /// Content (sha256) → an object already in the bucket with it, for copies inside the bucket.
    known: Mutex<HashMap<String, Key>>,
}

impl Remote {
    pub fn connect(url: &RemoteUrl) -> Result<Remote> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| {
                Error::remote(
                    url.to_string(),
                    because("cannot start the transfer runtime", e),
                )
            })?;
        Ok(Remote {
            url: url.clone(),
            store: object_store(&url.bucket)?,
            rt,
            known: Mutex::new(HashMap::new()),
        })
    }

    pub fn url(&self) -> &RemoteUrl {
        &self.url
    }

    /// The key of `rel` (a `/`-separated path under the prefix).
    fn key(&self, rel: &str) -> Key {
        match (self.url.prefix.is_empty(), rel.is_empty()) {
            (true, _) => Key::from(rel),
            (false, true) => Key::from(self.url.prefix.as_str()),
            (false, false) => Key::from(format!("{}/{rel}", self.url.prefix)),
        }
    }

    fn err(&self, rel: &str, e: impl Into<Cause>) -> Error {
        remote_err(&self.url, &self.key(rel), e)
    }

    /// Every object under `rel` (a directory, `""` for the whole prefix): path relative to the
    /// prefix → size.
    async fn list(&self, rel: &str) -> Result<BTreeMap<String, u64>> {
        let root = self.key("");
        let metas: Vec<object_store::ObjectMeta> = self
            .store
            .list(Some(&self.key(rel)))
            .try_collect()
            .await
            .map_err(|e| self.err(rel, e))?;
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let full = m.location.as_ref();
                let rel = if root.as_ref().is_empty() {
                    full.to_string()
                } else {
                    full.strip_prefix(root.as_ref())?
                        .strip_prefix('/')?
                        .to_string()
                };
                Some((rel, m.size))
            })
            .collect())
    }

    async fn get(&self, rel: &str) -> Result<Option<bytes::Bytes>> {
        get_optional(self.store.as_ref(), &self.url, &self.key(rel)).await
    }

    /// Downloads `rel` into `to` (through a temporary file renamed into place), checking its
    /// size and checksum when they are known.
    async fn download(&self, rel: &str, to: &Path, want: Option<(u64, &str)>) -> Result<u64> {
        let dir = to.parent().unwrap_or(Path::new("."));
        let name = to.file_name().unwrap_or_default().to_string_lossy();
        let (mut file, tmp) = super::pending(&super::temp_name(dir, &name))?;
        let mut stream = match self.store.get(&self.key(rel)).await {
            Ok(r) => r.into_stream(),
            Err(e) => return Err(self.err(rel, e)),
        };
        let mut hasher = Sha256::new();
        let mut n = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.err(rel, e))?;
            hasher.update(&chunk);
            n += chunk.len() as u64;
            file.write_all(&chunk).at(&tmp)?;
        }
        if let Some((bytes, sha)) = want {
            let got = super::hex_of(&hasher.finalize());
            if n != bytes || got != sha {
                return Err(self.err(
                    rel,
                    format!(
                        "{n} bytes with sha256 {got}, but its manifest lists {bytes} bytes with {sha}"
                    ),
                ));
            }
        }
        super::settle(file, tmp, to)?;
        super::sync_dir(dir)?;
        Ok(n)
    }

    /// Uploads the file `from` as `rel`: one request when small, in parts otherwise.
    async fn upload(&self, from: &Path, rel: &str) -> Result<u64> {
        let key = self.key(rel);
        let len = std::fs::metadata(from).at(from)?.len();
        if len as usize <= PART_BYTES {
            let bytes = std::fs::read(from).at(from)?;
            self.store
                .put(&key, PutPayload::from(bytes))
                .await
                .map_err(|e| self.err(rel, e))?;
            return Ok(len);
        }
        let upload = self
            .store
            .put_multipart(&key)
            .await
            .map_err(|e| self.err(rel, e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut file = std::fs::File::open(from).at(from)?;
        let mut buf = vec![0u8; PART_BYTES];
        loop {
            let n = file.read(&mut buf).at(from)?;
            if n == 0 {
                break;
            }
            w.wait_for_capacity(2).await.map_err(|e| self.err(rel, e))?;
            w.write(&buf[..n]);
        }
        w.finish().await.map_err(|e| self.err(rel, e))?;
        Ok(len)
    }

    async fn delete(&self, rel: &str) -> Result<()> {
        match self.store.delete(&self.key(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    fn remember(&self, base: &str, m: &Manifest) {
        let mut known = self.known.lock().expect("not poisoned");
        for f in &m.files {
            known.insert(f.sha256.clone(), self.key(&join(base, &f.path)));
        }
    }

    /// Brings every stage committed under the prefix (shards' stages too) into the local mirror
    /// `local`: for each remote manifest that differs from the local one, the files it lists that
    /// the mirror lacks (checked against the manifest), then the manifest. Local stages the
    /// bucket does not have are left for the run to publish.
    pub fn pull(&self, local: &Path) -> Result<SyncStats> {
        self.rt.block_on(async {
            let listing = self.list("").await?;
            let mut stats = SyncStats::default();
            for rel in listing.keys().filter(|k| is_manifest(k)) {
                let Some(bytes) = self.get(rel).await? else {
                    continue;
                };
                let m: Manifest = serde_json::from_slice(&bytes)
                    .map_err(|e| self.err(rel, format!("not a stage manifest: {e}")))?;
                let base = stage_base(rel);
                self.remember(base, &m);
                let at = local.join(rel);
                if std::fs::read(&at).ok().as_deref() == Some(&bytes[..]) {
                    continue;
                }
                let store = Store::new(local.join(base));
                let mut todo = Vec::new();
                for f in &m.files {
                    let p = store.inside(&f.path)?;
                    if std::fs::metadata(&p).map(|md| md.len()).ok() != Some(f.bytes) {
                        todo.push((join(base, &f.path), p, f.bytes, f.sha256.as_str()));
                    }
                }
                let moved: Vec<u64> =
                    in_flight(todo.iter().map(|(rel, p, bytes, sha)| async move {
                        self.download(rel, p, Some((*bytes, sha))).await
                    }))
                    .await?;
                write_atomic(&at, &bytes)?;
                stats.add(SyncStats {
                    manifests: 1,
                    objects: moved.len(),
                    bytes: moved.iter().sum(),
                    ..Default::default()
                });
            }
            Ok(stats)
        })
    }

    /// Publishes the stage directory `stage` (relative to the mirror `local`, e.g. `index`): the
    /// files its manifest lists that the bucket lacks (copied inside the bucket when the same
    /// content is already there), then the manifest, then deletes the stage's objects the
    /// manifest does not list (left by an older run or a killed one). A stage the mirror no
    /// longer has (retired) loses its manifest first, then its objects.
    pub fn push_stage(&self, local: &Path, stage: &str) -> Result<SyncStats> {
        self.rt.block_on(async {
            let rel_manifest = join(stage, MANIFEST);
            let mine = std::fs::read(local.join(&rel_manifest)).ok();
            let theirs = self.get(&rel_manifest).await?;
            if mine.as_deref() == theirs.as_deref() {
                return Ok(SyncStats::default());
            }
            let listing = self.list(stage).await?;
            let mut stats = SyncStats::default();
            let Some(mine) = mine else {
                self.delete(&rel_manifest).await?;
                for rel in listing.keys() {
                    self.delete(rel).await?;
                    stats.deleted += 1;
                }
                return Ok(stats);
            };
            let at = local.join(&rel_manifest);
            let m: Manifest = serde_json::from_slice(&mine)
                .map_err(|e| Error::artifact(&at, because("not a stage manifest", e)))?;
            let store = Store::new(local);
            let known: HashMap<String, Key> = self.known.lock().expect("not poisoned").clone();
            let todo: Vec<_> = m
                .files
                .iter()
                .filter(|f| listing.get(&f.path) != Some(&f.bytes))
                .collect();
            let moved: Vec<(u64, bool)> = in_flight(todo.into_iter().map(|f| {
                let known = &known;
                let store = &store;
                async move {
                    if let Some(from) = known.get(&f.sha256) {
                        let to = self.key(&f.path);
                        if *from != to && self.store.copy(from, &to).await.is_ok() {
                            return Ok((0, true));
                        }
                    }
                    let p = store.inside(&f.path)?;
                    Ok::<_, Error>((self.upload(&p, &f.path).await?, false))
                }
            }))
            .await?;
            for (bytes, copied) in moved {
                if copied {
                    stats.copied += 1;
                } else {
                    stats.objects += 1;
                    stats.bytes += bytes;
                }
            }
            self.store
                .put(&self.key(&rel_manifest), PutPayload::from(mine))
                .await
                .map_err(|e| self.err(&rel_manifest, e))?;
            stats.manifests = 1;
            self.remember("", &m);
            let listed: HashSet<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
            for rel in listing.keys() {
                if rel != &rel_manifest && !listed.contains(rel.as_str()) {
                    self.delete(rel).await?;
                    stats.deleted += 1;
                }
            }
            Ok(stats)
        })
    }

    /// Publishes one file of the mirror that no manifest lists (the run record, the report).
    pub fn push_file(&self, local: &Path, rel: &str) -> Result<()> {
        let from = local.join(rel);
        self.rt.block_on(self.upload(&from, rel)).map(|_| ())
    }

    /// Downloads the objects under `rel` that the local directory lacks (by name and size),
    /// except those named in `skip` (removed here on purpose). For directories of immutable,
    /// content-named files shared by many writers, such as an embedding cache.
    pub fn pull_dir(&self, local: &Path, rel: &str, skip: &HashSet<String>) -> Result<SyncStats> {
        self.rt.block_on(async {
            let listing = self.list(rel).await?;
            let todo: Vec<(String, std::path::PathBuf)> = listing
                .iter()
                .filter_map(|(r, size)| {
                    let name = r.rsplit('/').next()?;
                    let p = local.join(name);
                    let have = std::fs::metadata(&p).map(|m| m.len()).ok() == Some(*size);
                    (!have && !skip.contains(name) && !name.starts_with('.'))
                        .then(|| (r.clone(), p))
                })
                .collect();
            let moved: Vec<u64> = in_flight(todo.iter().map(|(r, p)| async move {
                // Another writer may have compacted it away since the listing.
                match self.download(r, p, None).await {
                    Ok(n) => Ok(n),
                    Err(e) => match self.store.head(&self.key(r)).await {
                        Err(object_store::Error::NotFound { .. }) => Ok(0),
                        _ => Err(e),
                    },
                }
            }))
            .await?;
            Ok(SyncStats {
                objects: moved.iter().filter(|&&n| n > 0).count(),
                bytes: moved.iter().sum(),
                ..Default::default()
            })
        })
    }

    /// Uploads the files of the local directory that the bucket lacks under `rel` (names not
    /// starting with `.`, not in `remove`), and deletes the objects named in `remove`.
    pub fn push_dir(&self, local: &Path, rel: &str, remove: &HashSet<String>) -> Result<SyncStats> {
        self.rt.block_on(async {
            let listing = self.list(rel).await?;
            let mut todo = Vec::new();
            for e in std::fs::read_dir(local).at(local)? {
                let e = e.at(local)?;
                let name = e.file_name().to_string_lossy().into_owned();
                let size = e.metadata().at(e.path())?.len();
                let r = join(rel, &name);
                let wanted = !name.starts_with('.') && !remove.contains(&name);
                if e.path().is_file() && wanted && listing.get(&r) != Some(&size) {
                    todo.push((e.path(), r));
                }
            }
            let moved: Vec<u64> = in_flight(
                todo.iter()
                    .map(|(p, r)| async move { self.upload(p, r).await }),
            )
            .await?;
            let mut deleted = 0;
            for name in remove {
                let r = join(rel, name);
                if listing.contains_key(&r) {
                    self.delete(&r).await?;
                    deleted += 1;
                }
            }
            Ok(SyncStats {
                objects: moved.len(),
                bytes: moved.iter().sum(),
                deleted,
                ..Default::default()
            })
        })
    }
}

/// Runs `jobs`, at most [`IN_FLIGHT`] at once; their results in completion order, or the first
/// error.
async fn in_flight<T>(
    jobs: impl IntoIterator<Item = impl std::future::Future<Output = Result<T>>>,
) -> Result<Vec<T>> {
    futures::stream::iter(jobs)
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await
}

fn join(base: &str, rel: &str) -> String {
    if base.is_empty() {
        rel.to_string()
    } else {
        format!("{base}/{rel}")
    }
}

/// Whether `rel` is a stage manifest (`[<base>/]<stage>/manifest.json`).
fn is_manifest(rel: &str) -> bool {
    rel.rsplit_once('/')
        .is_some_and(|(dir, name)| name == MANIFEST && !dir.is_empty())
}

/// The output directory a stage manifest belongs to: `shards/0-of-3` for
/// `shards/0-of-3/index/manifest.json`, `""` for `index/manifest.json`.
fn stage_base(rel: &str) -> &str {
    let dir = rel.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    dir.rsplit_once('/').map(|(b, _)| b).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_and_their_output_directories_are_told_apart() {
        assert!(is_manifest("index/manifest.json"));
        assert!(is_manifest("shards/0-of-3/index/manifest.json"));
        assert!(!is_manifest("manifest.json"));
        assert!(!is_manifest("index/chunks/manifest.json.tmp"));
        assert_eq!(stage_base("index/manifest.json"), "");
        assert_eq!(
            stage_base("shards/0-of-3/index/manifest.json"),
            "shards/0-of-3"
        );
        assert_eq!(join("", "a/b"), "a/b");
        assert_eq!(join("x", "a"), "x/a");
    }
}
