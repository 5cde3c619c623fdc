//! The one error type of the library: every variant carries the file, line, key or repository it is about.

use std::path::{Path, PathBuf};

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an [`Error`] was caused by: the underlying error itself (a Parquet, git, model or
/// DataFusion error, reachable through `source()` and `downcast_ref`), or ri-batch's own words
/// when nothing underneath failed. Anything that converts into a boxed error is one: every
/// `std::error::Error + Send + Sync`, a `String`, a `&str`.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Everything that can go wrong in ri-batch, with enough context to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The pipeline configuration is invalid; points at the file, line, column and key.
    #[error("{}:{line}:{column}: `{key}`: {message}", file.display())]
    Config {
        file: PathBuf,
        line: usize,
        column: usize,
        key: String,
        message: String,
    },
    /// A line of a dataset (JSONL) file is invalid.
    #[error("{}:{line}: {message}", file.display())]
    Dataset {
        file: PathBuf,
        line: usize,
        message: String,
    },
    /// A Parquet or Arrow artifact could not be read or written.
    #[error("{}: {source}", path.display())]
    Artifact { path: PathBuf, source: Cause },
    /// A repository could not be read (missing path, corrupt object, unknown rev).
    #[error("repository `{repo}`: {source}")]
    Repo { repo: String, source: Cause },
    /// A model directory could not be loaded or run.
    #[error("model {}: {source}", path.display())]
    Model { path: PathBuf, source: Cause },
    /// An object on S3-compatible storage could not be read or written.
    #[error("{url}: {source}")]
    Remote { url: String, source: Cause },
    /// A SQL query failed.
    #[error("sql: {0}")]
    Sql(#[source] Cause),
    /// A stage failed as a whole.
    #[error("stage `{stage}`: {source}")]
    Stage { stage: String, source: Cause },
    /// The pipeline cannot run here and says why (e.g. its import source is absent); not a failure.
    #[error("{0}")]
    Skipped(String),
    /// Anything else the user asked for that cannot be done, said plainly.
    #[error("{0}")]
    Invalid(String),
}

/// A cause with ri-batch's words of what was being done: displayed as `<what>: <cause>`, and
/// the underlying error still its `source()`.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {cause}")]
pub struct Because {
    what: String,
    #[source]
    cause: Cause,
}

/// `cause`, said to have happened while doing `what` (see [`Because`]).
pub fn because(what: impl Into<String>, cause: impl Into<Cause>) -> Cause {
    Box::new(Because {
        what: what.into(),
        cause: cause.into(),
    })
}

/// Exit status: everything done.
pub const EXIT_OK: u8 = 0;
/// Exit status: the run finished, but some repositories, revisions or questions failed (see
/// `errors`).
pub const EXIT_PARTIAL: u8 = 1;
/// Exit status: the input is wrong (configuration, question file, arguments, a query).
pub const EXIT_INVALID: u8 = 2;
/// Exit status: storage failed (disk full, read-only, permission denied) or a stored file does
/// not match its manifest.
pub const EXIT_STORAGE: u8 = 3;
/// Exit status: the run finished, but a figure its pipeline's `[[expect]]` pins was missed.
pub const EXIT_EXPECT: u8 = 4;

impl Error {
    /// The exit status this error ends the command with: [`EXIT_STORAGE`] for I/O failures other
    /// than a path that does not exist, and for artifacts that do not match their manifest;
    /// [`EXIT_INVALID`] for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Io { source, .. } if source.kind() != std::io::ErrorKind::NotFound => {
                EXIT_STORAGE
            }
            Error::Artifact { .. } | Error::Remote { .. } => EXIT_STORAGE,
            _ => EXIT_INVALID,
        }
    }

    /// An I/O error about `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// An artifact error about `path`.
    pub fn artifact(path: impl AsRef<Path>, cause: impl Into<Cause>) -> Self {
        Error::Artifact {
            path: path.as_ref().to_path_buf(),
            source: cause.into(),
        }
    }

    /// A repository error.
    pub fn repo(repo: impl Into<String>, cause: impl Into<Cause>) -> Self {
        Error::Repo {
            repo: repo.into(),
            source: cause.into(),
        }
    }

    /// A model error about the model at `path`.
    pub fn model(path: impl AsRef<Path>, cause: impl Into<Cause>) -> Self {
        Error::Model {
            path: path.as_ref().to_path_buf(),
            source: cause.into(),
        }
    }

    /// A stage-level error.
    pub fn stage(stage: impl AsRef<str>, cause: impl Into<Cause>) -> Self {
        Error::Stage {
            stage: stage.as_ref().into(),
            source: cause.into(),
        }
    }

    /// A SQL error.
    pub fn sql(cause: impl Into<Cause>) -> Self {
        Error::Sql(cause.into())
    }

    /// An error about the object at `url` on S3-compatible storage.
    pub fn remote(url: impl Into<String>, cause: impl Into<Cause>) -> Self {
        Error::Remote {
            url: url.into(),
            source: cause.into(),
        }
    }
}

/// Adds a path to `std::io::Result`s, ripgrep style.
pub trait IoContext<T> {
    /// Attach `path` to the error.
    fn at(self, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}

/// The message a panic carried (its `&str` or `String` payload), for an error that reports it.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The text of an input file the user names (a pipeline, a question file): a directory or a
/// device is refused by name, a leading UTF-8 byte-order mark is dropped, and bytes that are not
/// UTF-8 are an error naming their line ([`EXIT_INVALID`], not a storage failure).
pub fn read_text(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path).at(path)?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(Error::Invalid(format!(
            "{}: is {what}; give a file",
            path.display()
        )));
    }
    let bytes = std::fs::read(path).at(path)?;
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => {
            let good = &bytes[..e.valid_up_to()];
            let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
            let column =
                good.len() - good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
            Err(Error::Dataset {
                file: path.to_path_buf(),
                line,
                message: format!(
                    "not UTF-8: byte 0x{:02x} at column {column}; save the file as UTF-8",
                    bytes[e.valid_up_to()]
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_files_name_what_is_wrong_with_them() {
        let t = tempfile::tempdir().unwrap();
        let bom = t.path().join("bom.jsonl");
        std::fs::write(&bom, b"\xEF\xBB\xBF{\"a\":1}\n").unwrap();
        assert_eq!(read_text(&bom).unwrap(), "{\"a\":1}\n");
        let latin = t.path().join("latin.jsonl");
        std::fs::write(&latin, b"{}\n{\"q\":\"caf\xe9\"}\n").unwrap();
        let e = read_text(&latin).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_INVALID);
        assert!(e.to_string().contains("latin.jsonl:2: not UTF-8"), "{e}");
        let dir = read_text(t.path()).unwrap_err();
        assert_eq!(dir.exit_code(), EXIT_INVALID);
        assert!(dir.to_string().contains("is a directory"), "{dir}");
        let dev = read_text(Path::new("/dev/zero")).unwrap_err();
        assert!(dev.to_string().contains("not a regular file"), "{dev}");
    }

    #[test]
    fn messages_name_their_subject() {
        let e = Error::Config {
            file: "pipelines/x.toml".into(),
            line: 3,
            column: 1,
            key: "scan.max_bytes".into(),
            message: "unknown field".into(),
        };
        assert_eq!(
            e.to_string(),
            "pipelines/x.toml:3:1: `scan.max_bytes`: unknown field"
        );
        let io: Result<()> = Err(std::io::Error::from(std::io::ErrorKind::NotFound)).at("/nope");
        assert!(io.unwrap_err().to_string().starts_with("/nope: "));
    }

    #[test]
    fn errors_keep_their_cause() {
        use std::error::Error as _;
        let garbage = bytes::Bytes::from_static(b"not parquet at all, not even close");
        let Err(parquet) = parquet::file::reader::SerializedFileReader::new(garbage) else {
            panic!("garbage read as Parquet");
        };
        let text = parquet.to_string();
        let e = Error::artifact("out/chunks/part-0.parquet", parquet);
        assert_eq!(e.to_string(), format!("out/chunks/part-0.parquet: {text}"));
        let cause = e.source().expect("the parquet error is kept");
        assert!(cause.is::<parquet::errors::ParquetError>(), "{cause:?}");
        let io = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        let e = Error::model("m.gguf", because("not a readable GGUF file", io));
        assert!(e
            .to_string()
            .starts_with("model m.gguf: not a readable GGUF file: "));
        let io = e
            .source()
            .and_then(|c| c.source())
            .expect("two levels down");
        assert_eq!(
            io.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::UnexpectedEof)
        );
        let words = Error::stage("embed", "no model");
        assert_eq!(words.to_string(), "stage `embed`: no model");
    }
}
