//! The sensitivity filter: files that hold secrets by name (`.env*`, keys, credential files) or
//! by content (private-key blocks, cloud access keys, common token formats) are skipped whole, so
//! no byte of them reaches any artifact.

use regex::Regex;
use std::sync::OnceLock;

/// Why a file is sensitive, if it is, judged by its path alone.
pub fn sensitive_path(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    if name == ".env" || name.starts_with(".env.") || name.ends_with(".env") {
        return Some("dotenv file");
    }
    if matches!(
        ext,
        "pem" | "key" | "p12" | "pfx" | "jks" | "keystore" | "kdbx" | "ppk" | "asc" | "gpg"
    ) {
        return Some("key or certificate file");
    }
    if ["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"]
        .iter()
        .any(|k| name.starts_with(k))
    {
        return Some("ssh key");
    }
    let exact = [
        ".npmrc",
        ".pypirc",
        ".netrc",
        "_netrc",
        ".git-credentials",
        ".htpasswd",
        ".dockercfg",
        "credentials",
        "credentials.json",
        "credentials.yml",
        "credentials.yaml",
        "secrets.json",
        "secrets.yml",
        "secrets.yaml",
        "secrets.toml",
        "service-account.json",
        "terraform.tfvars",
        ".pgpass",
    ];
    if exact.contains(&name) {
        return Some("credential file");
    }
    if lower.contains(".aws/") || lower.contains(".ssh/") || lower.contains(".docker/config.json") {
        return Some("credential directory");
    }
    None
}

fn patterns() -> &'static [(Regex, &'static str)] {
    static P: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    P.get_or_init(|| {
        [
            // A key body (a long base64 run) must follow the marker: documentation that shows
            // the marker with a placeholder such as `Kh9NV...` is not a key.
            (
                r"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----[\s\S]{0,300}?[A-Za-z0-9+/]{40,}",
                "private key block",
            ),
            (r"\b(AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b", "aws access key id"),
            (
                r#"(?i)aws_?secret_?access_?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+]{40}"#,
                "aws secret access key",
            ),
            (r"\bgh[pousr]_[A-Za-z0-9]{36,}\b", "github token"),
            (r"\bgithub_pat_[A-Za-z0-9_]{40,}\b", "github token"),
            (r"\bglpat-[A-Za-z0-9_\-]{20,}\b", "gitlab token"),
            (r"\bxox[baprs]-[A-Za-z0-9-]{10,}\b", "slack token"),
            (r"\b[sr]k_live_[0-9A-Za-z]{20,}\b", "stripe key"),
            (r"\bAIza[0-9A-Za-z_\-]{35}\b", "google api key"),
            (r"\bnpm_[A-Za-z0-9]{36}\b", "npm token"),
            (r"\bsk-(proj-|ant-)?[A-Za-z0-9_\-]{32,}\b", "api secret key"),
            (r"\bhf_[A-Za-z0-9]{34,}\b", "hugging face token"),
            (
                r"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
                "json web token",
            ),
        ]
        .into_iter()
        .map(|(p, why)| (Regex::new(p).expect("valid secret pattern"), why))
        .collect()
    })
}

/// Why a file is sensitive, if it is, judged by its content.
pub fn sensitive_content(text: &str) -> Option<&'static str> {
    patterns()
        .iter()
        .find(|(re, _)| re.is_match(text))
        .map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        for p in [
            ".env",
            "app/.env.local",
            "certs/server.pem",
            "id_rsa",
            "home/.ssh/config",
            "x/.npmrc",
            "deploy/credentials.json",
        ] {
            assert!(sensitive_path(p).is_some(), "{p}");
        }
        for p in [
            "README.md",
            "src/env.rs",
            "lib/envelope.js",
            "keys.md",
            "docs/environment.md",
        ] {
            assert!(sensitive_path(p).is_none(), "{p}");
        }
    }

    #[test]
    fn contents() {
        let key = "x\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n";
        assert_eq!(sensitive_content(key), Some("private key block"));
        let rsa = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF0qJ7w3cYqGkh8v0pM2+Ab2zZ9yk\n";
        assert_eq!(sensitive_content(rsa), Some("private key block"));
        // dotenv's README documents multiline values with a placeholder key: not a secret.
        let doc = "PRIVATE_KEY=\"-----BEGIN RSA PRIVATE KEY-----\nKh9NV...\n-----END RSA PRIVATE KEY-----\"";
        assert_eq!(sensitive_content(doc), None);
        assert_eq!(
            sensitive_content("id = AKIAQWERTYUIOPASDFGH;"),
            Some("aws access key id")
        );
        assert!(sensitive_content("token: ghp_0123456789abcdefghijABCDEFGHIJ012345").is_some());
        assert!(sensitive_content("const k = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc'").is_some());
        assert!(
            sensitive_content("BEGIN PUBLIC KEY and AKIA lowercase akiaqwertyuiopasdfgh").is_none()
        );
        assert!(sensitive_content("fn main() { println!(\"hello\"); }").is_none());
    }
}
