//! Question sets: JSONL loading with line-numbered errors, and the anchor check that every
//! evidence quote is an exact substring of the named file.
//!
//! One question per line: `{"id", "repo", "split", "answerable", "question", "evidence": [{"path",
//! "quote"}], "gold": [{"path", "grade"}]}`. `gold` (optional) lists relevant documents for ranking
//! metrics. A question with `repo = "*"` searches all repositories; its paths are `repo/path`.

use crate::artifact::schema::{Evidence, FileRow, QuestionRow};
use crate::artifact::scope::{Scope, ALL};
use crate::error::{Error, Result};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuestion {
    id: String,
    repo: String,
    split: String,
    answerable: bool,
    question: String,
    #[serde(default)]
    evidence: Vec<Evidence>,
    #[serde(default)]
    gold: Vec<Gold>,
    /// The revision of `repo` the question is asked at (a commit, tag or branch); its scope is
    /// `<repo>@<label>` (see [`Scope::at`]).
    #[serde(default)]
    rev: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Gold {
    path: String,
    #[serde(default = "one")]
    grade: u32,
}

fn one() -> u32 {
    1
}

/// Loads and checks the shape of a question file (not its anchors: see [`check_anchors`]).
pub fn load_questions(path: &Path) -> Result<Vec<QuestionRow>> {
    let text = crate::error::read_text(path)?;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let err = |message: String| Error::Dataset {
            file: path.to_path_buf(),
            line: line_no,
            message,
        };
        let q: RawQuestion = serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
        if !seen.insert(q.id.clone()) {
            return Err(err(format!("duplicate id `{}`", q.id)));
        }
        if q.question.trim().is_empty() {
            return Err(err(format!("{}: empty question", q.id)));
        }
        if q.split.is_empty()
            || !q
                .split
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(err(format!(
                "{}: split must be a plain word such as dev or holdout",
                q.id
            )));
        }
        if q.answerable && q.evidence.is_empty() && q.gold.is_empty() {
            return Err(err(format!(
                "{}: answerable questions need evidence or gold documents",
                q.id
            )));
        }
        if !q.answerable && !q.evidence.is_empty() {
            return Err(err(format!(
                "{}: unanswerable questions carry no evidence",
                q.id
            )));
        }
        if q.evidence.iter().any(|e| e.quote.trim().is_empty()) {
            return Err(err(format!("{}: empty evidence quote", q.id)));
        }
        for e in &q.evidence {
            match (e.start_line, e.end_line) {
                (None, None) => {}
                (Some(a), Some(b)) if a >= 1 && a <= b => {}
                _ => {
                    return Err(err(format!(
                        "{}: evidence in {} needs both start_line and end_line, 1 <= start_line <= end_line",
                        q.id, e.path
                    )))
                }
            }
        }
        let named: Scope = q.repo.parse().map_err(|e| err(format!("{}: {e}", q.id)))?;
        if named.chunker().is_some() || named.revision().is_some() {
            return Err(err(format!(
                "{}: `repo` is a repository's name or `*`, not `{}` (a revision goes in `rev`)",
                q.id, q.repo
            )));
        }
        let scope = match &q.rev {
            None => named,
            Some(_) if q.repo == ALL => {
                return Err(err(format!(
                    "{}: a question over all repositories (`*`) takes no `rev`",
                    q.id
                )))
            }
            Some(r) if r.trim().is_empty() => {
                return Err(err(format!("{}: empty `rev`", q.id)));
            }
            Some(r) => Scope::at(&q.repo, r),
        };
        out.push(QuestionRow {
            question_id: q.id,
            scope,
            split: q.split,
            answerable: q.answerable,
            question: q.question,
            evidence: q.evidence,
            gold_paths: q.gold.iter().map(|g| g.path.clone()).collect(),
            gold_grades: q.gold.iter().map(|g| g.grade).collect(),
            rev: q.rev,
        });
    }
    Ok(out)
}

/// The (repository, rev) each question of a question file is asked at (`None`: the repository's
/// own), read before any work so that the plan knows every revision to scan.
pub fn question_revisions(path: &Path) -> Result<Vec<(String, Option<String>)>> {
    Ok(load_questions(path)?
        .into_iter()
        .filter(|q| !q.scope.is_all())
        .map(|q| (q.scope.repo_name().to_string(), q.rev))
        .collect())
}

/// Splits an evidence or gold path of a question of `scope` into (scope, path): a question over
/// all repositories names the repository as the path's first part.
pub fn locate<'a>(scope: &'a Scope, path: &'a str) -> (&'a str, &'a str) {
    if scope.is_all() {
        path.split_once('/').unwrap_or(("", path))
    } else {
        (scope.as_str(), path)
    }
}

/// [`locate`], naming the repository as chunks and packs name it (a revision's scope by its
/// repository).
fn locate_repo<'a>(scope: &'a Scope, path: &'a str) -> (&'a str, &'a str) {
    match locate(scope, path) {
        (_, p) if !scope.is_all() => (scope.group(), p),
        located => located,
    }
}

/// The evidence of question `q` as (repo, path, quote), each path located (see [`locate`]) and
/// the repository named as chunks and packs name it (a revision's scope by its repository).
pub fn quotes(q: &QuestionRow) -> Vec<(&str, &str, &str)> {
    q.evidence
        .iter()
        .map(|e| {
            let (r, p) = locate_repo(&q.scope, &e.path);
            (r, p, e.quote.as_str())
        })
        .collect()
}

/// The evidence of question `q` as [`crate::evaluation::metrics::Anchor`]s: [`quotes`] with their lines.
pub fn anchors(q: &QuestionRow) -> Vec<crate::evaluation::metrics::Anchor<'_>> {
    q.evidence
        .iter()
        .map(|e| {
            let (r, p) = locate_repo(&q.scope, &e.path);
            crate::evaluation::metrics::Anchor {
                repo: r,
                path: p,
                quote: &e.quote,
                lines: e.lines(),
            }
        })
        .collect()
}

/// Every anchor that fails: (question id, message). `files` are the scanned files.
pub fn check_anchors(
    questions: &[QuestionRow],
    files: &[FileRow],
    repos: &[Scope],
) -> Vec<(String, String)> {
    let mut check = AnchorCheck::new(questions);
    for f in files {
        check.add(&f.repo, f);
    }
    check.problems(repos)
}

/// A named file's distinct anchors (quote and lines), and whether each was found (`None` until the
/// file is seen).
type Named<'q> = (Vec<(&'q str, Option<(u32, u32)>)>, Option<Vec<bool>>);

/// The anchor check fed one scanned file at a time: it keeps, per file the questions name, only
/// whether it was scanned and which of its anchors it holds, never the text, so memory follows the
/// questions and not the files. Files are fed by the scope they are seen in (a repository, or one
/// revision of it), so an anchor is checked against the file at its question's revision.
pub struct AnchorCheck<'q> {
    questions: &'q [QuestionRow],
    /// Per named file (by scope, then path), its distinct anchors, and whether each was found
    /// (once the file is seen).
    quotes: HashMap<Scope, HashMap<&'q str, Named<'q>>>,
}

/// Whether `text` holds the anchor: lines `start..=end` equal to `quote`, or without lines,
/// `quote` anywhere.
fn holds(text: &str, quote: &str, lines: Option<(u32, u32)>) -> bool {
    match lines {
        None => text.contains(quote),
        Some((s, e)) => crate::text::lines_of(text, s, e).is_some_and(|l| l == quote),
    }
}

impl<'q> AnchorCheck<'q> {
    pub fn new(questions: &'q [QuestionRow]) -> AnchorCheck<'q> {
        let mut quotes: HashMap<Scope, HashMap<&str, Named>> = HashMap::new();
        // A question over all repositories names each file's repository in its path.
        let key = |q: &QuestionRow, repo: &str| match q.scope.is_all() {
            true => Scope::repo(repo),
            false => q.scope.clone(),
        };
        for q in questions {
            for e in &q.evidence {
                let (repo, path) = locate(&q.scope, &e.path);
                let entry = quotes
                    .entry(key(q, repo))
                    .or_default()
                    .entry(path)
                    .or_default();
                let anchor = (e.quote.as_str(), e.lines());
                if !entry.0.contains(&anchor) {
                    entry.0.push(anchor);
                }
            }
            for g in &q.gold_paths {
                let (repo, path) = locate(&q.scope, g);
                quotes
                    .entry(key(q, repo))
                    .or_default()
                    .entry(path)
                    .or_default();
            }
        }
        AnchorCheck { questions, quotes }
    }

    /// Whether a question names the file `path` of `scope`.
    pub fn names(&self, scope: &str, path: &str) -> bool {
        self.named(scope, path).is_some()
    }

    /// The scopes whose files a question names.
    pub fn scopes(&self) -> impl Iterator<Item = &Scope> {
        self.quotes.keys()
    }

    fn named(&self, scope: &str, path: &str) -> Option<&Named<'q>> {
        self.quotes.get(scope)?.get(path)
    }

    /// Looks at one scanned file as seen in `scope` (any file: those no question names are passed
    /// over).
    pub fn add(&mut self, scope: &str, f: &FileRow) {
        let named = self.quotes.get_mut(scope);
        if let Some((anchors, found)) = named.and_then(|m| m.get_mut(f.path.as_str())) {
            *found = Some(
                anchors
                    .iter()
                    .map(|(q, lines)| holds(&f.text, q, *lines))
                    .collect(),
            );
        }
    }

    /// Every anchor that does not hold, as (question id, problem). `scopes` are the run's
    /// (repositories, and their revisions).
    pub fn problems(&self, scopes: &[Scope]) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        for q in self.questions {
            if !q.scope.is_all() && !scopes.contains(&q.scope) {
                problems.push((
                    q.question_id.clone(),
                    format!("repository `{}` is not in the pipeline", q.scope),
                ));
                continue;
            }
            for e in &q.evidence {
                let (repo, path) = locate(&q.scope, &e.path);
                match self.named(repo, path).expect("listed") {
                    (_, None) => problems.push((
                        q.question_id.clone(),
                        format!("{repo}/{path}: no such scanned file"),
                    )),
                    (anchors, Some(found)) => {
                        let anchor = (e.quote.as_str(), e.lines());
                        let i = anchors.iter().position(|x| *x == anchor).expect("listed");
                        if !found[i] {
                            let what = match e.lines() {
                                Some((a, b)) => format!("lines {a}-{b} are not the quote"),
                                None => "quote not found".into(),
                            };
                            problems.push((
                                q.question_id.clone(),
                                format!("{repo}/{path}: {what}: {:?}", truncate(&e.quote, 60)),
                            ));
                        }
                    }
                }
            }
            for g in &q.gold_paths {
                let (repo, path) = locate(&q.scope, g);
                if self.named(repo, path).expect("listed").1.is_none() {
                    problems.push((
                        q.question_id.clone(),
                        format!("{repo}/{path}: gold document not scanned"),
                    ));
                }
            }
        }
        problems
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n).collect::<String>() + "…"
    }
}

/// Counts for `dataset check`: per split, (answerable, unanswerable); and per repository.
pub fn counts(
    questions: &[QuestionRow],
) -> (BTreeMap<String, (usize, usize)>, BTreeMap<String, usize>) {
    let mut by_split: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut by_repo: BTreeMap<String, usize> = BTreeMap::new();
    for q in questions {
        let e = by_split.entry(q.split.clone()).or_default();
        if q.answerable {
            e.0 += 1;
        } else {
            e.1 += 1;
        }
        *by_repo.entry(q.scope.to_string()).or_default() += 1;
    }
    (by_split, by_repo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(lines: &[&str]) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), lines.join("\n")).unwrap();
        f
    }

    #[test]
    fn a_question_names_a_repository_and_gives_its_revision_apart() {
        let line = |repo: &str, rev: &str| {
            format!(
                r#"{{"id":"a","repo":"{repo}","split":"dev","answerable":false,"question":"q?"{rev}}}"#
            )
        };
        let ok = write(&[
            &line("r", r#","rev":"v1.0""#),
            &line("*", "").replace("\"a\"", "\"b\""),
        ]);
        let qs = load_questions(ok.path()).unwrap();
        assert_eq!(qs[0].scope, Scope::at("r", "v1.0"));
        assert_eq!(qs[0].scope.repo_name(), "r");
        assert!(qs[1].scope.is_all());
        for (repo, says) in [
            ("r@v1", "a revision goes in `rev`"),
            ("r~syntax", "not `r~syntax`"),
            ("", "is not a scope"),
        ] {
            let f = write(&["", &line(repo, "")]);
            let e = load_questions(f.path()).unwrap_err().to_string();
            assert!(e.contains(":2") && e.contains(says), "{repo}: {e}");
        }
    }

    const GOOD: &str = r#"{"id":"a","repo":"r","split":"dev","answerable":true,"question":"q?","evidence":[{"path":"x.md","quote":"hello"}]}"#;

    #[test]
    fn errors_name_the_line() {
        let f = write(&[
            GOOD,
            r#"{"id":"b","repo":"r","split":"dev","answerable":true,"question":"q?"}"#,
        ]);
        let e = load_questions(f.path()).unwrap_err().to_string();
        assert!(e.contains(":2:") && e.contains("need evidence"), "{e}");
        let f = write(&[GOOD, GOOD]);
        assert!(load_questions(f.path())
            .unwrap_err()
            .to_string()
            .contains(":2: duplicate id"));
        let f = write(&[
            r#"{"id":"a","repo":"r","split":"dev","answerable":true,"question":"q","evidnce":[]}"#,
        ]);
        assert!(load_questions(f.path())
            .unwrap_err()
            .to_string()
            .contains("unknown field"));
    }

    #[test]
    fn anchors_must_be_exact_substrings() {
        let f = write(&[GOOD]);
        let qs = load_questions(f.path()).unwrap();
        let file = |text: &str| FileRow {
            repo: "r".into(),
            commit: "c".into(),
            path: "x.md".into(),
            blob_id: "b".into(),
            bytes: 1,
            language: "markdown".into(),
            text: text.into(),
        };
        assert!(check_anchors(&qs, &[file("say hello!")], &[Scope::repo("r")]).is_empty());
        let p = check_anchors(&qs, &[file("say Hello!")], &[Scope::repo("r")]);
        assert_eq!(p.len(), 1);
        assert!(p[0].1.contains("quote not found"));
        assert_eq!(
            check_anchors(&qs, &[], &[Scope::repo("r")])[0].1,
            "r/x.md: no such scanned file"
        );
    }
}
