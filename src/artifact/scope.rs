//! Scopes: what a question searches and what a partition holds, as one parsed type. A scope is a
//! repository (`django`) or all of them (`*`), optionally a named chunker's (`django~syntax`,
//! `*~syntax`), optionally at a revision (`django@0123abcd4567`, `django~syntax@0123abcd4567`).
//! Artifacts store a scope as that string (no format change); [`Scope`] parses it once, and every
//! part of it is read through its methods.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The repository part of the scope over every repository.
pub const ALL: &str = "*";

/// Separates a repository's name from a revision's label (`django@0123abcd4567`): no repository
/// name holds it.
pub const REV_SEP: char = '@';

/// Separates a named chunker from the repository (`django~syntax`, `*~syntax`). Repository names
/// cannot hold it.
pub const CHUNKER_SEP: char = '~';

/// A parsed scope name. It keeps its canonical string, so that it is shown, stored and used as a
/// partition name without being rebuilt, and the places where its parts end.
#[derive(Clone)]
pub struct Scope {
    name: String,
    /// End of the repository part (`django`, `*`).
    repo_end: usize,
    /// End of the group: the repository and its chunker, before any revision.
    group_end: usize,
}

impl Scope {
    /// The scope over every repository, under the default chunker.
    pub fn all() -> Scope {
        Scope::from_parts(ALL, None, None)
    }

    /// The scope of repository `repo` (or `*`), under the default chunker, at its own revision.
    pub fn repo(repo: &str) -> Scope {
        Scope::from_parts(repo, None, None)
    }

    /// The scope of `repo` at revision `rev`: its label is a full commit id's first 12 hex
    /// digits, or the rev with every character outside letters, digits and `-_.` replaced by `_`.
    pub fn at(repo: &str, rev: &str) -> Scope {
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
        Scope::from_parts(repo, None, Some(&label))
    }

    fn from_parts(repo: &str, chunker: Option<&str>, revision: Option<&str>) -> Scope {
        let mut name = repo.to_string();
        let repo_end = name.len();
        if let Some(c) = chunker {
            name.push(CHUNKER_SEP);
            name.push_str(c);
        }
        let group_end = name.len();
        if let Some(r) = revision {
            name.push(REV_SEP);
            name.push_str(r);
        }
        Scope {
            name,
            repo_end,
            group_end,
        }
    }

    /// The scope name, as artifacts store it.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The repository (`django` of `django~syntax@0123`), or `*`.
    pub fn repo_name(&self) -> &str {
        &self.name[..self.repo_end]
    }

    /// Whether this is a scope over every repository (`*`, `*~syntax`).
    pub fn is_all(&self) -> bool {
        self.repo_name() == ALL
    }

    /// The named chunker (`syntax` of `django~syntax@0123`), if any.
    pub fn chunker(&self) -> Option<&str> {
        (self.group_end > self.repo_end).then(|| &self.name[self.repo_end + 1..self.group_end])
    }

    /// The revision's label (`0123` of `django@0123`), if the scope names one.
    pub fn revision(&self) -> Option<&str> {
        (self.name.len() > self.group_end).then(|| &self.name[self.group_end + 1..])
    }

    /// The partition the scope reads, by name: its repository and chunker without the revision
    /// (`django~syntax` for `django~syntax@0123`). A repository's partitions (files, chunks,
    /// vectors, its index) serve every revision of it.
    pub fn group(&self) -> &str {
        &self.name[..self.group_end]
    }

    /// The same scope under a named `chunker` (`django~syntax@0123` for `django@0123` and
    /// `syntax`), or itself under the default chunker (`None`).
    pub fn with_chunker(&self, chunker: Option<&str>) -> Scope {
        match chunker {
            None => self.clone(),
            Some(c) => Scope::from_parts(self.repo_name(), Some(c), self.revision()),
        }
    }

    /// For a scope over every repository: the chunker it is of (`None` for `[chunk]`'s); `None`
    /// for a scope of one repository.
    pub fn over_all(&self) -> Option<Option<&str>> {
        self.is_all().then(|| self.chunker())
    }
}

/// The error of a name that is not a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadScope(String);

impl fmt::Display for BadScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a scope (repository or `*`, then optionally `{CHUNKER_SEP}chunker`, then \
             optionally `{REV_SEP}revision`, none of them empty)",
            self.0
        )
    }
}

impl std::error::Error for BadScope {}

impl FromStr for Scope {
    type Err = BadScope;

    fn from_str(s: &str) -> Result<Scope, BadScope> {
        let bad = || BadScope(s.to_string());
        let (group, revision) = match s.split_once(REV_SEP) {
            Some((g, r)) => (g, Some(r)),
            None => (s, None),
        };
        let (repo, chunker) = match group.split_once(CHUNKER_SEP) {
            Some((r, c)) => (r, Some(c)),
            None => (group, None),
        };
        let empty = |p: Option<&str>| p.is_some_and(|p| p.is_empty());
        if repo.is_empty() || empty(chunker) || empty(revision) {
            return Err(bad());
        }
        if chunker.is_some_and(|c| c.contains(CHUNKER_SEP))
            || revision.is_some_and(|r| r.contains(REV_SEP) || r.contains(CHUNKER_SEP))
        {
            return Err(bad());
        }
        Ok(Scope::from_parts(repo, chunker, revision))
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scope({:?})", self.name)
    }
}

impl PartialEq for Scope {
    fn eq(&self, other: &Scope) -> bool {
        self.name == other.name
    }
}

impl Eq for Scope {}

impl PartialEq<str> for Scope {
    fn eq(&self, other: &str) -> bool {
        self.name == other
    }
}

impl PartialEq<String> for Scope {
    fn eq(&self, other: &String) -> bool {
        self.name == *other
    }
}

impl PartialEq<Scope> for String {
    fn eq(&self, other: &Scope) -> bool {
        *self == other.name
    }
}

impl PartialEq<&str> for Scope {
    fn eq(&self, other: &&str) -> bool {
        self.name == *other
    }
}

impl std::hash::Hash for Scope {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name.hash(h)
    }
}

impl PartialOrd for Scope {
    fn partial_cmp(&self, other: &Scope) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scope {
    fn cmp(&self, other: &Scope) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

/// Maps keyed by scope are looked up by name (the hash, order and equality are the name's).
impl std::borrow::Borrow<str> for Scope {
    fn borrow(&self) -> &str {
        &self.name
    }
}

impl AsRef<str> for Scope {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str) -> Scope {
        name.parse().unwrap()
    }

    #[test]
    fn scopes_name_their_repository_and_revision() {
        let c = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(Scope::at("django", c).as_str(), "django@0123456789ab");
        assert_eq!(Scope::at("d", "origin/main").as_str(), "d@origin_main");
        assert_eq!(Scope::at("django", c).group(), "django");
        assert_eq!(Scope::at("django", c).revision(), Some("0123456789ab"));
        assert_eq!(s("django").group(), "django");
        assert_eq!(s("*").group(), "*");
        let odd = Scope::at("x", "v1.0/rc 1");
        assert!(crate::artifact::plain_name(odd.repo_name()));
        assert!(crate::artifact::plain_name(odd.revision().unwrap()));
        assert_eq!(s(odd.as_str()), odd, "a scope reads back as itself");
    }

    #[test]
    fn chunker_scopes_keep_the_revision_after_the_chunker() {
        let syntax = Some("syntax");
        assert_eq!(
            s("django@0123").with_chunker(syntax).as_str(),
            "django~syntax@0123"
        );
        assert_eq!(s("django").with_chunker(syntax).as_str(), "django~syntax");
        assert_eq!(Scope::all().with_chunker(syntax).as_str(), "*~syntax");
        assert_eq!(s("django@0123").with_chunker(None).as_str(), "django@0123");
        assert_eq!(s("django~syntax@0123").group(), "django~syntax");
        assert_eq!(s("django~syntax@0123").chunker(), Some("syntax"));
        assert_eq!(s("django~syntax@0123").repo_name(), "django");
        assert_eq!(s("*~syntax").chunker(), Some("syntax"));
        assert_eq!(s("django@0123").chunker(), None);
        assert_eq!(s("*").over_all(), Some(None));
        assert_eq!(s("*~syntax").over_all(), Some(Some("syntax")));
        assert_eq!(s("*x").over_all(), None);
        assert_eq!(s("django~syntax").over_all(), None);
    }

    #[test]
    fn names_that_are_not_scopes_are_refused_with_the_grammar() {
        for bad in [
            "", "@0123", "django@", "django~", "~syntax", "a~b~c", "a@b@c", "a@b~c",
        ] {
            let e = bad.parse::<Scope>().unwrap_err().to_string();
            assert!(
                e.contains("is not a scope") && e.contains("revision"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn scopes_travel_as_their_names() {
        let q = s("django~syntax@0123");
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(json, "\"django~syntax@0123\"");
        assert_eq!(serde_json::from_str::<Scope>(&json).unwrap(), q);
        assert!(serde_json::from_str::<Scope>("\"a@\"").is_err());
        let mut m = std::collections::BTreeMap::new();
        m.insert(q.clone(), 1);
        assert_eq!(m.get("django~syntax@0123"), Some(&1));
    }
}
