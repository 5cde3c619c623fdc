//! Language of a file from its name, for the `files.language` column and chunking style.

/// A short language name for `path` (`markdown`, `rust`, `javascript`, ..., or `text`).
pub fn language_of(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "md" | "markdown" | "mdx" => "markdown",
        "rs" => "rust",
        "js" | "mjs" | "cjs" | "jsx" => "javascript",
        "ts" | "mts" | "cts" | "tsx" => "typescript",
        "py" | "pyi" => "python",
        "go" => "go",
        "java" => "java",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" => "cpp",
        "rb" => "ruby",
        "sh" | "bash" | "zsh" => "shell",
        "json" => "json",
        "toml" => "toml",
        "yml" | "yaml" => "yaml",
        "html" | "htm" => "html",
        "css" => "css",
        "rst" => "rst",
        "txt" => "text",
        _ if name.starts_with("license")
            || name.starts_with("readme")
            || name.starts_with("changelog") =>
        {
            "text"
        }
        _ => "text",
    }
}

/// Whether files of this language are chunked as code (blank-line and top-level boundaries).
pub fn is_code(language: &str) -> bool {
    !matches!(language, "markdown" | "text" | "rst")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_by_extension() {
        assert_eq!(language_of("src/lib.rs"), "rust");
        assert_eq!(language_of("README.md"), "markdown");
        assert_eq!(language_of("lib/x.cjs"), "javascript");
        assert_eq!(language_of("LICENSE"), "text");
        assert!(is_code("rust") && !is_code("markdown"));
    }
}
