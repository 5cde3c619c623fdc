//! Scope names: a repository (`django`), a revision of it (`django@0123abcd4567`), a named
//! chunker's scope of either (`django~syntax`, `django~syntax@0123abcd4567`), and `*` over all.
//! Every partition per repository and every partition per question scope is named by these.

/// Scope name of the index over every repository (and the `repo` of a question over all).
pub const ALL: &str = "*";

/// Separates a repository's name from a revision's label in a scope name (`django@0123abcd4567`):
/// no repository name holds it.
pub const REV_SEP: char = '@';

/// The scope name of `repo` at revision `rev`: `<repo>@<label>`, the label being a full commit
/// id's first 12 hex digits, or the rev with every character outside letters, digits and `-_.`
/// replaced by `_`.
pub fn scope_of(repo: &str, rev: &str) -> String {
    let hex = rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit());
    let label: String = if hex {
        rev[..12].to_ascii_lowercase()
    } else {
        rev.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{repo}{REV_SEP}{label}")
}

/// Separates a named chunker from the repository in a chunker's partitions (`django~syntax`)
/// and scopes (`django~syntax@0123abcd4567`, `*~syntax`). Repository names cannot hold it.
pub const CHUNKER_SEP: char = '~';

/// The scope a variant with a named `chunker` searches for the questions of `scope`: the
/// repository (or `*`) qualified by the chunker, before any revision (so [`group_of`] is the
/// chunker's partition); `scope` itself for the default chunker.
pub fn chunker_scope(scope: &str, chunker: Option<&str>) -> String {
    match chunker {
        None => scope.to_string(),
        Some(c) => match scope.split_once(REV_SEP) {
            Some((repo, rev)) => format!("{repo}{CHUNKER_SEP}{c}{REV_SEP}{rev}"),
            None => format!("{scope}{CHUNKER_SEP}{c}"),
        },
    }
}

/// The named chunker of a partition or scope (`syntax` for `django~syntax@…`), if any.
pub fn chunker_of(scope: &str) -> Option<&str> {
    let group = group_of(scope);
    group.split_once(CHUNKER_SEP).map(|(_, c)| c)
}

/// For `*` or a named chunker's `*~name`: the chunker it is over all repositories of (`None`
/// for `[chunk]`'s); `None` for any other scope.
pub fn over_all(scope: &str) -> Option<Option<&str>> {
    let rest = group_of(scope).strip_prefix(ALL)?;
    if rest.is_empty() {
        return Some(None);
    }
    rest.strip_prefix(CHUNKER_SEP).map(Some)
}

/// The repository a scope belongs to: `django` for `django@0123abcd4567` and for `django`. The
/// repository's partitions (files, chunks, vectors, its index) serve every scope of it; a named
/// chunker's scope belongs to that chunker's partition (`django~syntax`).
pub fn group_of(scope: &str) -> &str {
    scope.split_once(REV_SEP).map_or(scope, |(g, _)| g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_name_their_repository_and_revision() {
        let c = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(scope_of("django", c), "django@0123456789ab");
        assert_eq!(scope_of("d", "origin/main"), "d@origin_main");
        assert_eq!(group_of(&scope_of("django", c)), "django");
        assert_eq!(group_of("django"), "django");
        assert_eq!(group_of("*"), "*");
        let (repo, label) = scope_of("x", "v1.0/rc 1")
            .split_once(REV_SEP)
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .unwrap();
        assert!(crate::artifact::plain_name(&repo) && crate::artifact::plain_name(&label));
    }

    #[test]
    fn chunker_scopes_keep_the_revision_after_the_chunker() {
        assert_eq!(
            chunker_scope("django@0123", Some("syntax")),
            "django~syntax@0123"
        );
        assert_eq!(chunker_scope("django", Some("syntax")), "django~syntax");
        assert_eq!(chunker_scope("*", Some("syntax")), "*~syntax");
        assert_eq!(chunker_scope("django@0123", None), "django@0123");
        assert_eq!(group_of("django~syntax@0123"), "django~syntax");
        assert_eq!(chunker_of("django~syntax@0123"), Some("syntax"));
        assert_eq!(chunker_of("*~syntax"), Some("syntax"));
        assert_eq!(chunker_of("django@0123"), None);
        assert_eq!(over_all("*"), Some(None));
        assert_eq!(over_all("*~syntax"), Some(Some("syntax")));
        assert_eq!(over_all("*x"), None);
        assert_eq!(over_all("django~syntax"), None);
    }
}
