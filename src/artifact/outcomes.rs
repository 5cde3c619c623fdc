//! The named values of enum-like columns and records: an extract's outcome and reason, a stage's
//! status in a run, and an answer's outcome. Each name is spelled once, here; rows carry the types
//! and Arrow stores their names as strings, so the tables read exactly as before.

use serde::{Deserialize, Serialize};
use std::fmt;

named! {
    /// How one question's extracted answer came out against its evidence.
    pub enum Outcome {
        /// Answerable; the rendered lines cover all its evidence.
        Full = "full",
        /// Answerable; the rendered lines cover some of its evidence.
        Partial = "partial",
        /// Answerable; an answer was given but covers none of its evidence.
        Irrelevant = "irrelevant",
        /// Answerable, but no answer was given.
        FalseRefusal = "false_refusal",
        /// Unanswerable, and refused.
        CorrectRefusal = "correct_refusal",
        /// Unanswerable, yet evidence was selected.
        FalseSelection = "false_selection",
    }
}

/// Why an extract was rendered, refused or rejected by the answer contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Reason {
    /// Accepted and rendered.
    Ok,
    /// The selector refused (`NONE`).
    Refused,
    /// An empty reply.
    Empty,
    /// A reply over the length limit.
    TooLong,
    /// A reply with words beside the evidence IDs.
    Prose,
    /// More IDs than `max_ids`.
    TooManyIds,
    /// Known and unknown IDs mixed.
    MixedValidInvalid,
    /// Only IDs that name no evidence.
    UnknownId,
    /// The source lines changed since the scan (their hash differs).
    SourceChanged,
    /// The source lines could not be read.
    SourceUnreadable,
    /// The model was not asked (no reply for the question).
    LlmNotAsked,
    /// The model's reply was not the expected JSON.
    LlmMalformed,
    /// The model could not be reached.
    LlmUnreachable,
    /// The model did not answer in time.
    LlmTimeout,
    /// The model answered with this HTTP error status (`llm_http_<status>`).
    LlmHttp(u16),
}

impl Reason {
    /// Every reason without data, with its name.
    pub const NAMED: [(Reason, &'static str); 14] = [
        (Reason::Ok, "ok"),
        (Reason::Refused, "refused"),
        (Reason::Empty, "empty"),
        (Reason::TooLong, "too_long"),
        (Reason::Prose, "prose"),
        (Reason::TooManyIds, "too_many_ids"),
        (Reason::MixedValidInvalid, "mixed_valid_invalid"),
        (Reason::UnknownId, "unknown_id"),
        (Reason::SourceChanged, "source_changed"),
        (Reason::SourceUnreadable, "source_unreadable"),
        (Reason::LlmNotAsked, "llm_not_asked"),
        (Reason::LlmMalformed, "llm_malformed"),
        (Reason::LlmUnreachable, "llm_unreachable"),
        (Reason::LlmTimeout, "llm_timeout"),
    ];
    const HTTP: &'static str = "llm_http_";

    /// Whether the answer contract refused or rejected the reply (anything but an accepted or a
    /// refused one): the summary's `contract_refusals`.
    pub fn is_contract_refusal(self) -> bool {
        !matches!(self, Reason::Ok | Reason::Refused)
    }

    /// Whether the endpoint, not the model, failed (unreachable, timed out, an HTTP error, a
    /// body that is not a chat completion): an error of the run, never a measured outcome.
    pub fn is_infrastructure(self) -> bool {
        matches!(
            self,
            Reason::LlmUnreachable | Reason::LlmTimeout | Reason::LlmHttp(_) | Reason::LlmMalformed
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::LlmHttp(status) => write!(f, "{}{status}", Reason::HTTP),
            r => {
                let (_, name) = Reason::NAMED.iter().find(|(n, _)| n == r).expect("named");
                f.write_str(name)
            }
        }
    }
}

impl From<Reason> for String {
    fn from(r: Reason) -> String {
        r.to_string()
    }
}

impl TryFrom<String> for Reason {
    type Error = String;
    fn try_from(s: String) -> Result<Reason, String> {
        if let Some((r, _)) = Reason::NAMED.iter().find(|(_, n)| *n == s) {
            return Ok(*r);
        }
        s.strip_prefix(Reason::HTTP)
            .and_then(|code| code.parse().ok())
            .map(Reason::LlmHttp)
            .ok_or_else(|| format!("unknown extract reason `{s}`"))
    }
}

named! {
    /// Why a variant was not run: the summary's status says so.
    pub enum NotRun {
        /// It needs vectors and the pipeline has no `[embed]` section.
        NoEmbedSection = "not run: no embeddings (the pipeline has no [embed] section)",
        /// It needs vectors and the embed stage has written none.
        NoEmbeddings = "not run: the embed stage has not produced embeddings",
    }
}

/// A variant's status in the summary: `ok`, or why it was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum VariantStatus {
    Ok,
    NotRun(NotRun),
}

impl fmt::Display for VariantStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VariantStatus::Ok => f.write_str("ok"),
            VariantStatus::NotRun(why) => why.fmt(f),
        }
    }
}

impl From<VariantStatus> for String {
    fn from(s: VariantStatus) -> String {
        s.to_string()
    }
}

impl TryFrom<String> for VariantStatus {
    type Error = String;
    fn try_from(s: String) -> Result<VariantStatus, String> {
        if s == "ok" {
            return Ok(VariantStatus::Ok);
        }
        NotRun::ALL
            .iter()
            .find(|n| n.name() == s)
            .map(|n| VariantStatus::NotRun(*n))
            .ok_or_else(|| format!("unknown variant status `{s}`"))
    }
}

/// What a run did with one stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageStatus {
    /// Computed (in whole or in part).
    Ran,
    /// Unchanged since the last run: its committed output stands.
    Skipped,
    /// Not run under this plan, and why (no `[embed]` section, say).
    Disabled(String),
}

impl fmt::Display for StageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StageStatus::Ran => f.write_str("ran"),
            StageStatus::Skipped => f.write_str("skipped"),
            StageStatus::Disabled(why) => write!(f, "disabled: {why}"),
        }
    }
}

named! {
    /// What a packed row holds: a whole chunk, or a unit of one (a sentence, list item, table
    /// row, code line or run of them) that the compacting packers cut.
    pub enum PackedKind {
        Chunk = "chunk",
        Unit = "unit",
    }
}

named! {
    /// What `ask` and `/ask` gave for one question.
    pub enum Answer {
        /// Evidence was selected, validated and rendered.
        Answered = "answered",
        /// No answer: refused, or rejected by the contract.
        Refused = "refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_are_unique() {
        fn check<T: Serialize + serde::de::DeserializeOwned + PartialEq + fmt::Debug + Copy>(
            all: &[T],
            name: impl Fn(T) -> &'static str,
        ) {
            let mut seen = std::collections::HashSet::new();
            for &v in all {
                let json = serde_json::to_string(&v).unwrap();
                assert_eq!(json, format!("\"{}\"", name(v)));
                assert_eq!(serde_json::from_str::<T>(&json).unwrap(), v);
                assert!(seen.insert(name(v)), "{} twice", name(v));
            }
        }
        check(Outcome::ALL, Outcome::name);
        check(NotRun::ALL, NotRun::name);
        check(Answer::ALL, Answer::name);
        check(PackedKind::ALL, PackedKind::name);
        assert!(serde_json::from_str::<Outcome>("\"fine\"").is_err());
    }

    #[test]
    fn reasons_and_statuses_keep_their_stored_names() {
        let mut all: Vec<Reason> = Reason::NAMED.iter().map(|(r, _)| *r).collect();
        all.push(Reason::LlmHttp(503));
        for r in all {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), r, "{json}");
        }
        assert_eq!(Reason::LlmHttp(404).to_string(), "llm_http_404");
        assert_eq!(Reason::MixedValidInvalid.to_string(), "mixed_valid_invalid");
        assert!(Reason::try_from("llm_http_x".to_string()).is_err());
        assert!(Reason::try_from("fine".to_string()).is_err());
        let not_run = VariantStatus::NotRun(NotRun::NoEmbeddings);
        for s in [VariantStatus::Ok, not_run] {
            let back = VariantStatus::try_from(s.to_string()).unwrap();
            assert_eq!(back, s);
        }
        assert_eq!(VariantStatus::Ok.to_string(), "ok");
        assert_eq!(
            StageStatus::Disabled("no [embed]".into()).to_string(),
            "disabled: no [embed]"
        );
    }

    #[test]
    fn only_rejections_are_contract_refusals() {
        assert!(!Reason::Ok.is_contract_refusal());
        assert!(!Reason::Refused.is_contract_refusal());
        assert!(Reason::Prose.is_contract_refusal());
        assert!(Reason::LlmHttp(429).is_contract_refusal());
        assert!(Reason::LlmUnreachable.is_infrastructure());
        assert!(!Reason::Prose.is_infrastructure() && !Reason::Refused.is_infrastructure());
    }
}
