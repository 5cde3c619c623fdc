//! Pipeline variants: the retriever, packer, selector and budget of each compared configuration,
//! and the check that expands `[[variants]]` (budget sweeps included) into them.

use super::locate::{parse_enum, Locator};
use super::spec::{CompactOverrides, PackingSpec, RetrievalSpec, Variant};
use super::ChunkConfig;
use crate::error::Result;
pub use crate::retrieval::Fusion;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVariant {
    name: Spanned<String>,
    retriever: Spanned<String>,
    #[serde(default = "default_packer")]
    packer: Spanned<String>,
    #[serde(default)]
    budget: Option<Spanned<usize>>,
    /// A sweep: one variant per budget, named `<name>@<budget>`.
    #[serde(default)]
    budgets: Option<Spanned<Vec<usize>>>,
    /// Hybrid fusion weights, e.g. `{ bm25 = 1.0, dense = 1.0 }`.
    #[serde(default)]
    weights: Option<Spanned<BTreeMap<String, f64>>>,
    #[serde(default)]
    selector: Option<Spanned<String>>,
    /// How a hybrid variant fuses its two lists: `rrf` (default) or `score`.
    #[serde(default)]
    fusion: Option<Spanned<String>>,
    /// A compact variant's weight on the cosine between the question and each unit (their
    /// `[embed]` vectors), added to the unit's lexical score; 0 (default) scores terms only.
    #[serde(default)]
    unit_dense: Option<Spanned<f64>>,
    /// How the variant ranks files for file-level metrics (and `file_retrievals`): `chunks`
    /// (default: each file at its best pooled chunk), `whole` (a BM25 index over whole files) or
    /// `fused` (both rankings fused by reciprocal rank).
    #[serde(default)]
    files: Option<Spanned<String>>,
    /// With `files`: the weight of a chunk's file in its pool score (each list normalised by its
    /// best): chunk score / best + `file_weight` × file score / best; 0 (default) leaves the
    /// chunk pool as the retriever ranks it.
    #[serde(default)]
    file_weight: Option<Spanned<f64>>,
    /// The `[chunkers.<name>]` whose chunks (and index and vectors) the variant retrieves and
    /// packs; unset: `[chunk]`'s.
    #[serde(default)]
    chunker: Option<Spanned<String>>,
    /// A compact variant's own compaction settings, over `[pack]`'s (same keys and ranges).
    #[serde(default)]
    compact_top_chunks: Option<Spanned<usize>>,
    #[serde(default)]
    neighbour_bonus: Option<Spanned<f64>>,
    #[serde(default)]
    heading_bonus: Option<Spanned<f64>>,
    #[serde(default)]
    lean: Option<Spanned<f64>>,
    #[serde(default)]
    rank_prior: Option<Spanned<f64>>,
    #[serde(default)]
    coverage: Option<Spanned<f64>>,
    #[serde(default)]
    follow: Option<Spanned<f64>>,
}

fn default_packer() -> Spanned<String> {
    Spanned::new(0..0, "rank".to_string())
}

/// Which retriever a variant uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Retriever {
    Bm25,
    Dense,
    Hybrid,
}

/// Which packer a variant uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Packer {
    Rank,
    MarginalGain,
    Compact,
    /// IntelliRAG's plain-BM25 baseline over the question's repository (its own BM25; the
    /// variant's retriever supplies only the reported pool).
    IntelliragBm25,
    /// IntelliRAG's compaction over the question's repository, as its method states.
    Intellirag,
    /// The same with the lean floor (units within 20% of the best).
    IntelliragLean,
}

impl Packer {
    /// Whether the packer ranks the question's whole repository itself (IntelliRAG's setting).
    pub fn reads_repository(self) -> bool {
        matches!(
            self,
            Packer::IntelliragBm25 | Packer::Intellirag | Packer::IntelliragLean
        )
    }
}

/// How a variant ranks files (localization: which files does the question concern?).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileRanking {
    /// Each file at its best chunk in the variant's pool (its first occurrence).
    #[default]
    Chunks,
    /// BM25 over whole files (path and text as one document), its own index.
    Whole,
    /// Reciprocal rank fusion of the whole-file ranking and the best-chunk ranking.
    Fused,
}

impl FileRanking {
    pub(super) fn is_default(&self) -> bool {
        *self == FileRanking::Chunks
    }
}

/// Which selector the extract stage uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selector {
    Lexical,
    Oracle,
    Llm,
    /// Refuses when the pack's support (see [`crate::answer::selectors::support`]) is under
    /// `[extract] refuse_below`, else selects the units best covering the question.
    Calibrated,
    /// A GGUF chat model in-process (`[extract.reader]`), its reply constrained to the contract.
    Reader,
}

/// A variant's weight `key`, checked to be a finite number >= 0 (an error at its line).
fn non_negative(loc: &Locator, x: &Option<Spanned<f64>>, key: &str) -> Result<Option<f64>> {
    match x {
        Some(w) if !w.get_ref().is_finite() || *w.get_ref() < 0.0 => {
            Err(loc.error(w.span(), format!("`{key}` must be a finite number >= 0")))
        }
        Some(w) => Ok(Some(*w.get_ref())),
        None => Ok(None),
    }
}

/// Checks a compact variant's own compaction keys (the ranges `[pack]` has).
fn compact_overrides(loc: &Locator, v: &RawVariant, packer: Packer) -> Result<CompactOverrides> {
    let set = [
        v.compact_top_chunks.as_ref().map(|x| x.span()),
        v.neighbour_bonus.as_ref().map(|x| x.span()),
        v.heading_bonus.as_ref().map(|x| x.span()),
        v.lean.as_ref().map(|x| x.span()),
        v.rank_prior.as_ref().map(|x| x.span()),
        v.coverage.as_ref().map(|x| x.span()),
        v.follow.as_ref().map(|x| x.span()),
    ];
    if let Some(span) = set.iter().flatten().next() {
        if packer != Packer::Compact {
            return Err(loc.error(
                span.clone(),
                "`compact_top_chunks`, `neighbour_bonus`, `heading_bonus`, `lean`, `rank_prior`, \
                 `coverage` and `follow` apply to the compact packer only",
            ));
        }
    }
    let top_chunks = match &v.compact_top_chunks {
        Some(n) if !(1..=super::MAX_TOP_K).contains(n.get_ref()) => {
            return Err(loc.error(
                n.span(),
                format!(
                    "`compact_top_chunks` must be within 1..={}",
                    super::MAX_TOP_K
                ),
            ))
        }
        Some(n) => Some(*n.get_ref()),
        None => None,
    };
    let share = |x: &Option<Spanned<f64>>, key: &str| -> Result<Option<f64>> {
        match x {
            Some(l) if !(0.0..=1.0).contains(l.get_ref()) => {
                Err(loc.error(l.span(), format!("`{key}` must be within [0, 1]")))
            }
            Some(l) => Ok(Some(*l.get_ref())),
            None => Ok(None),
        }
    };
    Ok(CompactOverrides {
        top_chunks,
        neighbour_bonus: non_negative(loc, &v.neighbour_bonus, "neighbour_bonus")?,
        heading_bonus: non_negative(loc, &v.heading_bonus, "heading_bonus")?,
        lean: share(&v.lean, "lean")?,
        rank_prior: share(&v.rank_prior, "rank_prior")?,
        coverage: share(&v.coverage, "coverage")?,
        follow: share(&v.follow, "follow")?,
    })
}

/// The named chunker a variant uses, which `[chunkers.<name>]` must declare.
fn chunker_of(
    loc: &Locator,
    v: &RawVariant,
    chunkers: &BTreeMap<String, ChunkConfig>,
) -> Result<Option<String>> {
    Ok(match &v.chunker {
        Some(c) if !chunkers.contains_key(c.get_ref()) => {
            let known: Vec<&str> = chunkers.keys().map(|k| k.as_str()).collect();
            return Err(loc.error(
                c.span(),
                format!(
                    "no `[chunkers.{}]` section (declared: {})",
                    c.get_ref(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
        Some(c) => Some(c.get_ref().clone()),
        None => None,
    })
}

/// The (name, budget) variants one declaration expands to: `budget`, or one per `budgets`
/// entry named `<name>@<budget>` (default 1,400 tokens).
fn budgets_of(
    loc: &Locator,
    v: &RawVariant,
) -> Result<Vec<(String, usize, std::ops::Range<usize>)>> {
    Ok(match (&v.budget, &v.budgets) {
        (Some(b), None) => vec![(v.name.get_ref().clone(), *b.get_ref(), b.span())],
        (None, Some(bs)) if !bs.get_ref().is_empty() => bs
            .get_ref()
            .iter()
            .map(|b| (format!("{}@{b}", v.name.get_ref()), *b, bs.span()))
            .collect(),
        (None, None) => vec![(v.name.get_ref().clone(), 1400, v.name.span())],
        _ => {
            return Err(loc.error(
                v.name.span(),
                "give either `budget` or a non-empty `budgets`, not both",
            ))
        }
    })
}

pub(super) fn expand_variants(
    loc: &Locator,
    raw: &[RawVariant],
    chunkers: &BTreeMap<String, ChunkConfig>,
) -> Result<Vec<Variant>> {
    let mut out: Vec<Variant> = Vec::new();
    for v in raw {
        let chunker = chunker_of(loc, v, chunkers)?;
        let retriever = parse_enum::<Retriever>(loc, &v.retriever)?;
        let packer = parse_enum::<Packer>(loc, &v.packer)?;
        let selector = match &v.selector {
            Some(s) => parse_enum::<Selector>(loc, s)?,
            None => Selector::Lexical,
        };
        let fusion = match &v.fusion {
            Some(f) => {
                if retriever != Retriever::Hybrid {
                    return Err(loc.error(f.span(), "`fusion` applies to hybrid variants only"));
                }
                parse_enum::<Fusion>(loc, f)?
            }
            None => Fusion::Rrf,
        };
        let weights_span = v.weights.as_ref().map_or(v.name.span(), |w| w.span());
        let weights = v
            .weights
            .as_ref()
            .map(|w| w.get_ref().clone())
            .unwrap_or_default();
        for (k, w) in &weights {
            if !w.is_finite() || *w < 0.0 {
                return Err(loc.error(
                    weights_span.clone(),
                    format!("weight `{k}` must be a finite number >= 0"),
                ));
            }
        }
        for k in weights.keys() {
            if k != "bm25" && k != "dense" {
                return Err(loc.error(
                    weights_span.clone(),
                    format!("unknown weight `{k}`: use bm25 and dense"),
                ));
            }
        }
        let unit_dense = non_negative(loc, &v.unit_dense, "unit_dense")?.unwrap_or(0.0);
        if let Some(w) = v.unit_dense.as_ref().filter(|_| packer != Packer::Compact) {
            return Err(loc.error(w.span(), "`unit_dense` applies to the compact packer only"));
        }
        let files = match &v.files {
            Some(f) => parse_enum::<FileRanking>(loc, f)?,
            None => FileRanking::Chunks,
        };
        let file_weight = non_negative(loc, &v.file_weight, "file_weight")?.unwrap_or(0.0);
        if let Some(w) = v
            .file_weight
            .as_ref()
            .filter(|_| files == FileRanking::Chunks)
        {
            return Err(loc.error(
                w.span(),
                "`file_weight` needs a file ranking: set `files = \"whole\"` or `\"fused\"`",
            ));
        }
        let compact = compact_overrides(loc, v, packer)?;
        let budgets = budgets_of(loc, v)?;
        for (name, budget, budget_span) in budgets {
            if out.iter().any(|x| x.name == name) {
                return Err(loc.error(v.name.span(), format!("variant `{name}` is defined twice")));
            }
            let budget =
                super::Budget::new(budget as u64).map_err(|why| loc.error(budget_span, why))?;
            out.push(Variant {
                name,
                retrieval: RetrievalSpec {
                    retriever,
                    weight_bm25: *weights.get("bm25").unwrap_or(&1.0),
                    weight_dense: *weights.get("dense").unwrap_or(&1.0),
                    fusion,
                    files,
                    file_weight,
                    chunker: chunker.clone(),
                },
                packing: PackingSpec {
                    packer,
                    budget,
                    unit_dense,
                    compact,
                },
                selector,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{parse, BASE};
    use super::*;

    #[test]
    fn unknown_names_list_every_value_the_enum_accepts() {
        let v = |key: &str, value: &str| {
            format!(
                "{BASE}\n[[variants]]\nname = \"v\"\nretriever = \"bm25\"\n{key} = \"{value}\"\n"
            )
        };
        let e = parse(&v("packer", "nope")).unwrap_err().to_string();
        assert!(
            e.contains(
                "rank, marginal-gain, compact, intellirag-bm25, intellirag, intellirag-lean"
            ),
            "{e}"
        );
        let e = parse(&v("selector", "nope")).unwrap_err().to_string();
        assert!(e.contains("calibrated") && e.contains("reader"), "{e}");
        assert!(e.contains("unknown value `nope`"), "{e}");
    }

    #[test]
    fn sweeps_expand_and_baseline_must_exist() {
        let text = format!(
            "{BASE}\n[[variants]]\nname = \"b\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudgets = [350, 700]\n\n[evaluate]\nbaseline = \"b@350\"\n"
        );
        let p = parse(&text).unwrap();
        let names: Vec<_> = p.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["b@350", "b@700"]);
        assert_eq!(p.variants[1].packing.packer, Packer::Compact);
        let bad = text.replace("b@350\"", "nope\"");
        assert!(parse(&bad)
            .unwrap_err()
            .to_string()
            .contains("baseline `nope`"));
        let fused = text.replace(
            "packer = \"compact\"",
            "packer = \"compact\"\nfusion = \"score\"",
        );
        let e = parse(&fused).unwrap_err().to_string();
        assert!(e.contains("hybrid variants only"), "{e}");
        let hybrid = fused.replace("\"bm25\"", "\"hybrid\"");
        assert_eq!(
            parse(&hybrid).unwrap().variants[0].retrieval.fusion,
            Fusion::Score
        );
        let bad = text.replace("\"bm25\"", "\"bm52\"");
        let e = parse(&bad).unwrap_err().to_string();
        assert!(
            e.contains(":10:") && e.contains("variants[0].retriever"),
            "{e}"
        );
    }

    const COMPACT: &str = "[[variants]]\nname = \"d\"\nretriever = \"bm25\"\npacker = \"compact\"\nunit_dense = 0.25\n";

    #[test]
    fn unit_dense_needs_the_compact_packer_and_an_embed_model() {
        let embed = "[embed]\nmodel = \"models/x\"\n";
        let p = parse(&format!("{BASE}\n{embed}\n{COMPACT}")).unwrap();
        assert_eq!(p.variants[0].packing.unit_dense, 0.25);
        assert!(p.unit_vectors());
        // No [embed]: an error naming the section and the variant.
        let e = parse(&format!("{BASE}\n{COMPACT}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("embed") && e.contains("variant `d`"), "{e}");
        // Another packer: an error at the key's line.
        let rank = COMPACT.replace("\"compact\"", "\"rank\"");
        let e = parse(&format!("{BASE}\n{embed}\n{rank}"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":14:") && e.contains("compact packer only"),
            "{e}"
        );
        let negative = COMPACT.replace("0.25", "-1.0");
        let e = parse(&format!("{BASE}\n{embed}\n{negative}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("finite number >= 0"), "{e}");
        // Without the key, units are scored by terms and nothing extra is embedded.
        let plain = COMPACT.replace("unit_dense = 0.25\n", "");
        let p = parse(&format!("{BASE}\n{plain}")).unwrap();
        assert_eq!(p.variants[0].packing.unit_dense, 0.0);
        assert!(!p.unit_vectors());
    }

    #[test]
    fn a_compact_variant_sets_its_own_compaction_over_packs() {
        let text = format!(
            "{BASE}\n[pack]\ncompact_top_chunks = 12\nlean = 0.1\n\n[[variants]]\nname = \"own\"\nretriever = \"bm25\"\npacker = \"compact\"\nlean = 0.3\ncompact_top_chunks = 20\nbudgets = [450, 900]\n\n[[variants]]\nname = \"base\"\nretriever = \"bm25\"\npacker = \"compact\"\n"
        );
        let p = parse(&text).unwrap();
        let base = p.pack.compact_params();
        let own = p.variants[0].packing.compact_params(base);
        assert_eq!((own.top_chunks, own.lean), (20, 0.3));
        assert_eq!(own.neighbour_bonus, base.neighbour_bonus);
        assert_eq!(p.variants[2].packing.compact_params(base).top_chunks, 12);
        assert_eq!(p.variants[2].packing.compact_params(base).lean, 0.1);
        assert!(
            p.variants[2].packing.compact.is_empty() && !p.variants[0].packing.compact.is_empty()
        );
        // The sweep's variants share the settings.
        assert_eq!(p.variants[0].packing.compact, p.variants[1].packing.compact);
        // Out of range, or on another packer: an error at the key's line.
        let e = parse(&text.replace("lean = 0.3", "lean = 1.5"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(":16:") && e.contains("within [0, 1]"), "{e}");
        let e = parse(&text.replace("compact_top_chunks = 20", "compact_top_chunks = 0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":17:") && e.contains("compact_top_chunks"),
            "{e}"
        );
        let rank = text.replacen("packer = \"compact\"\nlean", "packer = \"rank\"\nlean", 1);
        let e = parse(&rank).unwrap_err().to_string();
        assert!(e.contains("compact packer only"), "{e}");
    }
}
