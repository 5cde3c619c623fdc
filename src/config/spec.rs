//! A variant as specs: what decides its pool ([`RetrievalSpec`]), its pack ([`PackingSpec`]) and
//! its answer ([`Selector`]). Each stage's fingerprint of a variant is the serialized form of the
//! spec it runs (the retrieve stage also computes a pool once per distinct retrieval spec), so a
//! cache key cannot stop describing what ran. The serialized forms are the keys earlier releases
//! wrote, so their runs stay reusable.

use super::sections::is_zero;
use super::{Budget, FileRanking, Packer, Retriever, Selector};
use crate::packing::CompactParams;
use crate::retrieval::{Fusion, COSINE_VERSION};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

/// One expanded variant (a sweep is already split into one per budget).
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub name: String,
    pub retrieval: RetrievalSpec,
    pub packing: PackingSpec,
    pub selector: Selector,
}

/// What decides a variant's pool. Variants with equal specs share one retrieval.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalSpec {
    pub retriever: Retriever,
    /// Hybrid fusion weight of the BM25 list.
    pub weight_bm25: f64,
    /// Hybrid fusion weight of the dense list.
    pub weight_dense: f64,
    pub fusion: Fusion,
    /// How the variant ranks files (see [`FileRanking`]).
    pub files: FileRanking,
    /// Weight of a chunk's file in its pool score (0: the retriever's order).
    pub file_weight: f64,
    /// The named chunker (`[chunkers.<name>]`) of the variant's chunks; `None`: `[chunk]`.
    pub chunker: Option<String>,
}

/// What decides a variant's pack, given its pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PackingSpec {
    pub packer: Packer,
    pub budget: Budget,
    /// Weight of the question-unit cosine in a compact variant's unit score (0: terms only).
    pub unit_dense: f64,
    /// The compaction settings the variant sets itself (the rest are `[pack]`'s).
    pub compact: CompactOverrides,
}

/// A compact variant's own values of `[pack]`'s compaction keys; `None` keeps `[pack]`'s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CompactOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_chunks: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub neighbour_bonus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heading_bonus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lean: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank_prior: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow: Option<f64>,
}

impl CompactOverrides {
    /// Whether the variant sets none (its packs then depend on `[pack]` alone).
    pub fn is_empty(&self) -> bool {
        *self == CompactOverrides::default()
    }
}

/// `{"chunker": name}`, `{"cosine": version}`: the tagged entries of a spec's key.
#[derive(Serialize)]
struct Tagged<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    chunker: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cosine: Option<u32>,
}

/// The retrieve stage's key: retriever, weights and fusion; then what the spec sets beyond them
/// (a file ranking and its weight, a named chunker), and the cosine's version when dense scores
/// take part. Only what a spec sets is listed, so older runs' keys stay as they were.
impl Serialize for RetrievalSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        seq.serialize_element(&self.retriever)?;
        seq.serialize_element(&self.weight_bm25)?;
        seq.serialize_element(&self.weight_dense)?;
        seq.serialize_element(&self.fusion)?;
        if self.ranks_files() {
            seq.serialize_element(&self.files)?;
            seq.serialize_element(&self.file_weight)?;
        }
        if let Some(c) = &self.chunker {
            seq.serialize_element(&Tagged {
                chunker: Some(c),
                cosine: None,
            })?;
        }
        if self.dense() {
            seq.serialize_element(&Tagged {
                chunker: None,
                cosine: Some(COSINE_VERSION),
            })?;
        }
        seq.end()
    }
}

/// The pack stage's key: packer and budget; the unit cosine's weight (and the cosine's version)
/// when units are scored dense; the variant's own compaction settings when it has any.
impl Serialize for PackingSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        seq.serialize_element(&self.packer)?;
        seq.serialize_element(&self.budget)?;
        if self.unit_dense > 0.0 {
            seq.serialize_element(&self.unit_dense)?;
            seq.serialize_element(&Tagged {
                chunker: None,
                cosine: Some(COSINE_VERSION),
            })?;
        }
        if !self.compact.is_empty() {
            seq.serialize_element(&self.compact)?;
        }
        seq.end()
    }
}

/// A whole variant, as the evaluate stage keys it and run records show it: one flat object, each
/// optional setting only when set.
impl Serialize for Variant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (r, p) = (&self.retrieval, &self.packing);
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.name)?;
        m.serialize_entry("retriever", &r.retriever)?;
        m.serialize_entry("packer", &p.packer)?;
        m.serialize_entry("budget", &p.budget)?;
        m.serialize_entry("weight_bm25", &r.weight_bm25)?;
        m.serialize_entry("weight_dense", &r.weight_dense)?;
        m.serialize_entry("fusion", &r.fusion)?;
        m.serialize_entry("selector", &self.selector)?;
        if !is_zero(&p.unit_dense) {
            m.serialize_entry("unit_dense", &p.unit_dense)?;
        }
        if !r.files.is_default() {
            m.serialize_entry("files", &r.files)?;
        }
        if !is_zero(&r.file_weight) {
            m.serialize_entry("file_weight", &r.file_weight)?;
        }
        if let Some(c) = &r.chunker {
            m.serialize_entry("chunker", c)?;
        }
        if !p.compact.is_empty() {
            m.serialize_entry("compact", &p.compact)?;
        }
        m.end()
    }
}

impl Variant {
    /// A stage's key of this variant: its name, then the serialized `spec` the stage runs.
    pub fn key(&self, spec: &impl Serialize) -> serde_json::Value {
        let mut key = vec![serde_json::Value::from(self.name.as_str())];
        match serde_json::to_value(spec).expect("specs serialize") {
            serde_json::Value::Array(items) => key.extend(items),
            one => key.push(one),
        }
        serde_json::Value::Array(key)
    }
}

impl RetrievalSpec {
    /// Whether dense scores take part (dense or hybrid retrieval).
    pub fn dense(&self) -> bool {
        self.retriever != Retriever::Bm25
    }

    /// Whether the variant ranks files otherwise than by their best chunk.
    pub fn ranks_files(&self) -> bool {
        self.files != FileRanking::Chunks
    }
}

impl PackingSpec {
    /// The compact packer's settings for this variant: `[pack]`'s, with the variant's own over them.
    pub fn compact_params(&self, base: CompactParams) -> CompactParams {
        let o = &self.compact;
        CompactParams {
            top_chunks: o.top_chunks.unwrap_or(base.top_chunks),
            neighbour_bonus: o.neighbour_bonus.unwrap_or(base.neighbour_bonus),
            heading_bonus: o.heading_bonus.unwrap_or(base.heading_bonus),
            lean: o.lean.unwrap_or(base.lean),
            rank_prior: o.rank_prior.unwrap_or(base.rank_prior),
            coverage: o.coverage.unwrap_or(base.coverage),
            follow: o.follow.unwrap_or(base.follow),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{parse, BASE};
    use super::*;
    use serde_json::{json, Value};

    /// The keys earlier releases wrote for a variant, field by field: retrieve's, pack's, and the
    /// whole variant's text (evaluate's key, and run records).
    fn legacy(v: &Variant) -> [Value; 3] {
        let (r, p) = (&v.retrieval, &v.packing);
        let mut retrieve = vec![
            json!(v.name),
            json!(r.retriever),
            json!(r.weight_bm25),
            json!(r.weight_dense),
            json!(r.fusion),
        ];
        if r.files != FileRanking::Chunks {
            retrieve.extend([json!(r.files), json!(r.file_weight)]);
        }
        if let Some(c) = &r.chunker {
            retrieve.push(json!({ "chunker": c }));
        }
        if r.retriever != Retriever::Bm25 {
            retrieve.push(json!({ "cosine": COSINE_VERSION }));
        }
        let mut pack = vec![json!(v.name), json!(p.packer), json!(p.budget)];
        if p.unit_dense > 0.0 {
            pack.push(json!(p.unit_dense));
            pack.push(json!({ "cosine": COSINE_VERSION }));
        }
        if !p.compact.is_empty() {
            pack.push(json!(p.compact));
        }
        let mut whole: Vec<(&str, Value)> = vec![
            ("name", json!(v.name)),
            ("retriever", json!(r.retriever)),
            ("packer", json!(p.packer)),
            ("budget", json!(p.budget)),
            ("weight_bm25", json!(r.weight_bm25)),
            ("weight_dense", json!(r.weight_dense)),
            ("fusion", json!(r.fusion)),
            ("selector", json!(v.selector)),
        ];
        if p.unit_dense != 0.0 {
            whole.push(("unit_dense", json!(p.unit_dense)));
        }
        if r.files != FileRanking::Chunks {
            whole.push(("files", json!(r.files)));
        }
        if r.file_weight != 0.0 {
            whole.push(("file_weight", json!(r.file_weight)));
        }
        if let Some(c) = &r.chunker {
            whole.push(("chunker", json!(c)));
        }
        if !p.compact.is_empty() {
            whole.push(("compact", json!(p.compact)));
        }
        // The derived form's text: its fields in declaration order.
        let fields: Vec<String> = whole
            .iter()
            .map(|(k, v)| format!("{}:{v}", json!(k)))
            .collect();
        let whole = format!("{{{}}}", fields.join(","));
        [
            Value::Array(retrieve),
            Value::Array(pack),
            Value::String(whole),
        ]
    }

    #[test]
    fn stage_keys_are_the_specs_and_equal_earlier_releases_keys() {
        let plan = parse(&format!(
            "{BASE}[embed]\nmodel = \"models/x\"\n[chunkers.syntax]\nmethod = \"syntax\"\n\
             [[variants]]\nname = \"lexical\"\nretriever = \"bm25\"\npacker = \"rank\"\n\
             [[variants]]\nname = \"hybrid\"\nretriever = \"hybrid\"\nfusion = \"score\"\n\
             weights = {{ bm25 = 0.7, dense = 0.3 }}\npacker = \"compact\"\nunit_dense = 0.25\n\
             lean = 0.5\nbudgets = [300, 900]\n\
             [[variants]]\nname = \"files\"\nretriever = \"bm25\"\nfiles = \"whole\"\n\
             file_weight = 0.5\nchunker = \"syntax\"\npacker = \"marginal-gain\"\n"
        ))
        .unwrap();
        assert_eq!(plan.variants.len(), 4);
        for v in &plan.variants {
            let [retrieve, pack, whole] = legacy(v);
            assert_eq!(v.key(&v.retrieval), retrieve, "{}", v.name);
            assert_eq!(v.key(&v.packing), pack, "{}", v.name);
            // Byte for byte, field order included: the evaluate stage hashes this text.
            assert_eq!(Value::String(serde_json::to_string(v).unwrap()), whole);
        }
        // The two budgets of one sweep retrieve alike and pack apart.
        let (a, b) = (&plan.variants[1], &plan.variants[2]);
        assert_eq!(a.retrieval, b.retrieval);
        assert_ne!(a.key(&a.packing), b.key(&b.packing));
    }
}
