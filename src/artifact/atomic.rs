//! The one way a file becomes visible: written under a temporary name in its own directory (a
//! name a stage's journal can list before the file exists, so a crash leaves nothing unnamed),
//! fsynced, renamed into place, and its directory fsynced before anything that names it.

use crate::error::{Error, IoContext, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use tempfile::TempPath;

/// The temporary name of a file about to become `name` in `dir`: `.<name>.tmp-<pid>`.
pub fn temp_name(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!(".{name}.tmp-{}", std::process::id()))
}

/// Creates the temporary file `tmp` (its directory too): the open file to write, and the name
/// that [`settle`] renames (dropped unfinished, it removes the file). A leftover of the same
/// name, from a crashed run of a process with the same id, is replaced.
pub fn pending(tmp: &Path) -> Result<(std::fs::File, TempPath)> {
    let dir = tmp.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).at(dir)?;
    let file = std::fs::File::create(tmp).at(tmp)?;
    Ok((file, TempPath::try_from_path(tmp).at(tmp)?))
}

/// Makes a written temporary file `to`: fsync of its contents, then the rename. The caller syncs
/// `to`'s directory ([`sync_dir`]) before writing anything that names it.
pub fn settle(file: std::fs::File, tmp: TempPath, to: &Path) -> Result<()> {
    file.sync_all().at(&tmp)?;
    drop(file);
    tmp.persist(to).map_err(|e| Error::io(to, e.error))
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename,
/// and a sync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let (mut file, tmp) = pending(&temp_name(dir, &name))?;
    file.write_all(bytes).at(&tmp)?;
    settle(file, tmp, path)?;
    sync_dir(dir)
}

/// Makes a directory's entries (a rename into it) durable: fsync of the directory itself, where
/// the platform allows opening one (elsewhere a no-op).
pub fn sync_dir(dir: &Path) -> Result<()> {
    match std::fs::File::open(dir) {
        Ok(d) => match d.sync_all() {
            Ok(()) => Ok(()),
            // Some file systems refuse fsync on a directory; the rename itself stands.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
            Err(e) if e.raw_os_error() == Some(22) => Ok(()),
            Err(e) => Err(Error::io(dir, e)),
        },
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_the_file_and_leaves_no_temporary() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("sub/manifest.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<String> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["manifest.json"]);
    }

    #[test]
    fn an_unfinished_file_is_removed_and_never_takes_the_final_name() {
        let t = tempfile::tempdir().unwrap();
        let tmp = temp_name(t.path(), "part.parquet");
        let (mut file, path) = pending(&tmp).unwrap();
        assert_eq!(&*path, tmp);
        file.write_all(b"half").unwrap();
        drop((file, path));
        assert!(!tmp.exists());
        assert!(!t.path().join("part.parquet").exists());
    }
}
