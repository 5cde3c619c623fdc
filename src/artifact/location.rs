//! `s3://bucket/prefix` locations (an output directory or an embedding cache on object storage):
//! parsed and checked when a pipeline file is, and mapped to their local mirror.

use std::path::{Path, PathBuf};

/// An `s3://bucket/prefix` location on S3-compatible object storage (an output directory or an
/// embedding cache), published from a local mirror by `crate::artifact::remote`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteUrl {
    pub bucket: String,
    /// Without leading or trailing `/`; may be empty (the bucket's root).
    pub prefix: String,
}

impl RemoteUrl {
    /// `None` when `text` is not an `s3://` URL; the reason when it is one but malformed.
    pub fn parse(text: &str) -> Option<std::result::Result<RemoteUrl, String>> {
        let rest = text.strip_prefix("s3://")?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !bucket_ok {
            return Some(Err(format!(
                "`{text}`: `{bucket}` is not an S3 bucket name (3-63 of a-z, 0-9, '-', '.')"
            )));
        }
        let prefix = prefix.trim_end_matches('/');
        if !prefix.is_empty() && !prefix.split('/').all(plain_name) {
            return Some(Err(format!(
                "`{text}`: each part of the prefix must be a plain name (letters, digits, '-', '_', '.'; not `.` or `..`)"
            )));
        }
        Some(Ok(RemoteUrl {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        }))
    }

    /// The location `rel` (`/`-separated) below this one.
    pub fn join(&self, rel: &str) -> RemoteUrl {
        let prefix = if self.prefix.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.prefix)
        };
        RemoteUrl {
            bucket: self.bucket.clone(),
            prefix,
        }
    }

    /// The location this one is in (the bucket's root at the top).
    pub fn parent(&self) -> RemoteUrl {
        RemoteUrl {
            bucket: self.bucket.clone(),
            prefix: self
                .prefix
                .rsplit_once('/')
                .map(|(p, _)| p.to_string())
                .unwrap_or_default(),
        }
    }

    /// Its local mirror under the mirror root: `<root>/<bucket>/<prefix>`.
    pub fn mirror(&self, root: &Path) -> PathBuf {
        let mut p = root.join(&self.bucket);
        for part in self.prefix.split('/').filter(|s| !s.is_empty()) {
            p.push(part);
        }
        p
    }
}

/// A path part that is a plain name: letters, digits, `-`, `_` and `.`, not `.` or `..` (a
/// repository's name, a part of an `s3://` prefix).
pub fn plain_name(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

impl std::fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_join_and_map_to_their_mirror() {
        assert!(RemoteUrl::parse("outputs/x").is_none());
        let u = RemoteUrl::parse("s3://evals/nightly/run/")
            .unwrap()
            .unwrap();
        assert_eq!(u.to_string(), "s3://evals/nightly/run");
        assert_eq!(u.join("shards/0-of-2").prefix, "nightly/run/shards/0-of-2");
        assert_eq!(
            u.parent().join(".embedding-cache").prefix,
            "nightly/.embedding-cache"
        );
        assert_eq!(
            u.mirror(Path::new("/m")),
            PathBuf::from("/m/evals/nightly/run")
        );
        let root = RemoteUrl::parse("s3://evals").unwrap().unwrap();
        assert_eq!(root.prefix, "");
        assert_eq!(root.join("a").prefix, "a");
        for bad in [
            "s3://Evals/x",
            "s3://ab/x",
            "s3://evals/../x",
            "s3://evals/a//b",
        ] {
            assert!(RemoteUrl::parse(bad).unwrap().is_err(), "{bad}");
        }
    }
}
