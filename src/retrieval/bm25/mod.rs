//! BM25 (Lucene variant): idf = ln(1 + (N - n + 0.5) / (n + 0.5)), and per term
//! idf * tf / (tf + k1 * (1 - b + b * dl / avgdl)). Built from analysed documents or from the
//! stored CSR index of a scope ([`stored`]); scored term-at-a-time into a dense accumulator. The
//! scoring is written once, over the [`Postings`] trait, so an index in memory and one mapped from
//! disk give bit-identical scores.

mod row;
pub mod stored;

use std::borrow::Cow;
use std::collections::HashMap;

/// A term's postings: internal document numbers (ascending) and term frequencies, borrowed from
/// the index or decoded from its stored form.
pub type List<'a> = (Cow<'a, [u32]>, Cow<'a, [u32]>);

/// What scoring needs of an index: each document's length and each term's postings.
pub trait Postings: Sync {
    /// Length (in terms) of every document, by internal number.
    fn lengths(&self) -> &[u32];
    /// The postings of `term`.
    fn list(&self, term: &str) -> Option<List<'_>>;
}

/// Mean document length (0 for an empty scope).
pub fn avgdl(lengths: &[u32]) -> f64 {
    let total: u64 = lengths.iter().map(|&l| l as u64).sum();
    if lengths.is_empty() {
        0.0
    } else {
        total as f64 / lengths.len() as f64
    }
}

/// Per-document length normalisation k1 * (1 - b + b * dl / avgdl).
pub fn norms(lengths: &[u32], p: Params) -> Vec<f64> {
    let avgdl = avgdl(lengths);
    lengths
        .iter()
        .map(|&l| p.k1 * (1.0 - p.b + p.b * l as f64 / avgdl))
        .collect()
}

/// Scores of the documents matching at least one term of `query`, as (doc, score) in no
/// particular order. A repeated query term counts each time, as in Lucene (one clause each).
/// `norms` come from [`norms`]; `acc` is scratch space of at least as many zeros as documents,
/// left zeroed.
pub fn score_into<P: Postings + ?Sized>(
    index: &P,
    query: &[String],
    norms: &[f64],
    acc: &mut [f64],
) -> Vec<(u32, f64)> {
    let n = index.lengths().len();
    let mut touched: Vec<u32> = Vec::new();
    for t in query {
        let Some((docs, tfs)) = index.list(t) else {
            continue;
        };
        let idf = lucene_idf(n, docs.len());
        for (&d, &tf) in docs.iter().zip(tfs.iter()) {
            let tf = tf as f64;
            let slot = &mut acc[d as usize];
            if *slot == 0.0 {
                touched.push(d);
            }
            *slot += idf * tf / (tf + norms[d as usize]);
        }
    }
    touched
        .into_iter()
        .map(|d| {
            let s = std::mem::take(&mut acc[d as usize]);
            (d, s)
        })
        .collect()
}

/// Lucene idf of a term found in `df` of `docs` documents (0 when it is in none).
pub fn lucene_idf(docs: usize, df: usize) -> f64 {
    if df == 0 {
        return 0.0;
    }
    let n = df as f64;
    (1.0 + (docs as f64 - n + 0.5) / (n + 0.5)).ln()
}

/// A fast, fixed (reproducible) hasher for term tables.
pub type TermMap<V> = HashMap<String, V, foldhash::fast::FixedState>;

/// BM25 parameters.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub k1: f64,
    pub b: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params { k1: 1.2, b: 0.75 }
    }
}

/// An in-memory inverted index over one scope.
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// External document ids (chunk ids), by internal number.
    pub docs: Vec<String>,
    pub lengths: Vec<u32>,
    /// term → term number.
    terms: TermMap<u32>,
    /// Postings of each term number: internal doc numbers (ascending) and term frequencies.
    lists: Vec<(Vec<u32>, Vec<u32>)>,
}

impl Index {
    /// Builds an index from (id, terms) documents.
    pub fn build<I, V, S>(docs: I) -> Index
    where
        I: IntoIterator<Item = (String, V)>,
        V: AsRef<[S]>,
        S: AsRef<str>,
    {
        let mut index = Index::default();
        let mut scratch = Vec::new();
        for (id, terms) in docs {
            index.add(id, terms.as_ref(), &mut scratch);
        }
        index
    }

    /// Adds one document (its id and analysed terms) as the next internal number; `scratch` is
    /// reused between calls. Building document by document gives the same index as
    /// [`Index::build`]. Returns the number of postings added (the document's distinct terms).
    pub fn add<S: AsRef<str>>(&mut self, id: String, terms: &[S], scratch: &mut Vec<u32>) -> usize {
        let d = self.docs.len() as u32;
        self.docs.push(id);
        self.lengths.push(terms.len() as u32);
        scratch.clear();
        for t in terms {
            scratch.push(self.term_id_or_insert(t.as_ref()));
        }
        scratch.sort_unstable();
        let mut added = 0;
        let mut i = 0;
        while i < scratch.len() {
            let mut j = i + 1;
            while j < scratch.len() && scratch[j] == scratch[i] {
                j += 1;
            }
            let list = &mut self.lists[scratch[i] as usize];
            list.0.push(d);
            list.1.push((j - i) as u32);
            added += 1;
            i = j;
        }
        added
    }

    /// Number of distinct terms.
    pub fn terms_len(&self) -> usize {
        self.lists.len()
    }

    fn term_id_or_insert(&mut self, t: &str) -> u32 {
        if let Some(&id) = self.terms.get(t) {
            return id;
        }
        let id = self.lists.len() as u32;
        self.terms.insert(t.to_string(), id);
        self.lists.push((Vec::new(), Vec::new()));
        id
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Every term with its postings (docs ascending, tfs), in no particular order.
    pub fn terms(&self) -> impl Iterator<Item = (&str, (&[u32], &[u32]))> {
        self.terms.iter().map(|(t, &i)| {
            let (d, f) = &self.lists[i as usize];
            (t.as_str(), (d.as_slice(), f.as_slice()))
        })
    }

    /// Scores of every document for `query` terms, as a dense vector.
    pub fn scores(&self, query: &[String], p: Params) -> Vec<f64> {
        let norms = norms(&self.lengths, p);
        let mut acc = vec![0.0; self.len()];
        let mut out = vec![0.0; self.len()];
        for (d, s) in score_into(self, query, &norms, &mut acc) {
            out[d as usize] = s;
        }
        out
    }

    /// The `k` best documents for `query`: (internal number, score), best first, ties by number.
    /// Documents that match no query term are not returned.
    pub fn search(&self, query: &[String], k: usize, p: Params) -> Vec<(u32, f64)> {
        Searcher::new(self, p).search(query, k)
    }
}

impl Postings for Index {
    fn lengths(&self) -> &[u32] {
        &self.lengths
    }
    fn list(&self, term: &str) -> Option<List<'_>> {
        self.terms.get(term).map(|&t| {
            let (d, f) = &self.lists[t as usize];
            (Cow::Borrowed(d.as_slice()), Cow::Borrowed(f.as_slice()))
        })
    }
}

/// Repeated queries against one index, reusing the length norms and the accumulator.
pub struct Searcher<'a, P: Postings + ?Sized = Index> {
    index: &'a P,
    norms: Vec<f64>,
    acc: Vec<f64>,
}

impl<'a, P: Postings + ?Sized> Searcher<'a, P> {
    pub fn new(index: &'a P, p: Params) -> Searcher<'a, P> {
        Searcher {
            index,
            norms: norms(index.lengths(), p),
            acc: vec![0.0; index.lengths().len()],
        }
    }

    /// The `k` best documents for `query`, best first, ties by internal number.
    pub fn search(&mut self, query: &[String], k: usize) -> Vec<(u32, f64)> {
        let mut hits = score_into(self.index, query, &self.norms, &mut self.acc);
        hits.retain(|&(_, s)| s > 0.0);
        select_top(hits, k)
    }
}

/// A scope over some of an index's documents: one revision of a repository whose index holds
/// every revision's chunks. Its documents are `members` (index numbers) in the order a build over
/// them alone would number them, and its statistics (N, df, avgdl) are theirs, so its scores and
/// ranks equal those of an index built over them alone.
#[derive(Debug, Clone)]
pub struct Subset {
    members: Vec<u32>,
    /// Per index document: its position among the members plus one, or 0 when not a member.
    pos: Vec<u32>,
}

impl Subset {
    /// The subset of an index of `docs` documents made of `members`; a member number outside the
    /// index is left out of the positions (it matches nothing).
    pub fn new(docs: usize, members: Vec<u32>) -> Subset {
        let mut pos = vec![0u32; docs];
        for (i, &d) in members.iter().enumerate() {
            if let Some(slot) = pos.get_mut(d as usize) {
                *slot = i as u32 + 1;
            }
        }
        Subset { members, pos }
    }

    /// The members, in their own order.
    pub fn members(&self) -> &[u32] {
        &self.members
    }

    /// Number of documents of the subset.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether index document `d` is a member.
    pub fn holds(&self, d: u32) -> bool {
        self.pos.get(d as usize).is_some_and(|&p| p != 0)
    }

    /// Documents of the subset holding `term` in `index`.
    pub fn df<P: Postings + ?Sized>(&self, index: &P, term: &str) -> usize {
        index.list(term).map_or(0, |(docs, _)| {
            docs.iter().filter(|&&d| self.holds(d)).count()
        })
    }

    /// The members' lengths in `index`, in member order.
    pub fn lengths<P: Postings + ?Sized>(&self, index: &P) -> Vec<u32> {
        let all = index.lengths();
        self.members
            .iter()
            .map(|&d| all.get(d as usize).copied().unwrap_or(0))
            .collect()
    }
}

/// Repeated queries against a [`Subset`] of an index: hits are index document numbers, ranked and
/// tied as an index over the members alone would rank them.
pub struct SubsetSearcher<'a, P: Postings + ?Sized> {
    index: &'a P,
    subset: &'a Subset,
    norms: Vec<f64>,
    acc: Vec<f64>,
}

impl<'a, P: Postings + ?Sized> SubsetSearcher<'a, P> {
    pub fn new(index: &'a P, subset: &'a Subset, p: Params) -> SubsetSearcher<'a, P> {
        let lengths = subset.lengths(index);
        SubsetSearcher {
            index,
            subset,
            norms: norms(&lengths, p),
            acc: vec![0.0; lengths.len()],
        }
    }

    /// The `k` best documents for `query` (index numbers), best first, ties by member position.
    pub fn search(&mut self, query: &[String], k: usize) -> Vec<(u32, f64)> {
        let (sub, n) = (self.subset, self.subset.len());
        let mut touched: Vec<u32> = Vec::new();
        for t in query {
            let Some((docs, tfs)) = self.index.list(t) else {
                continue;
            };
            let df = docs.iter().filter(|&&d| sub.holds(d)).count();
            if df == 0 {
                continue;
            }
            let idf = lucene_idf(n, df);
            for (&d, &tf) in docs.iter().zip(tfs.iter()) {
                let p = sub.pos[d as usize];
                if p == 0 {
                    continue;
                }
                let p = (p - 1) as usize;
                let tf = tf as f64;
                let slot = &mut self.acc[p];
                if *slot == 0.0 {
                    touched.push(p as u32);
                }
                *slot += idf * tf / (tf + self.norms[p]);
            }
        }
        let hits: Vec<(u32, f64)> = touched
            .into_iter()
            .map(|p| (p, std::mem::take(&mut self.acc[p as usize])))
            .filter(|&(_, s)| s > 0.0)
            .collect();
        select_top(hits, k)
            .into_iter()
            .map(|(p, s)| (sub.members[p as usize], s))
            .collect()
    }
}

/// The `k` best (item, score) pairs, best first, ties broken by item.
pub fn select_top(mut hits: Vec<(u32, f64)>, k: usize) -> Vec<(u32, f64)> {
    let cmp = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if hits.len() > k {
        hits.select_nth_unstable_by(k, cmp);
        hits.truncate(k);
    }
    hits.sort_by(cmp);
    hits
}

/// The `k` largest positive entries of `scores`, best first, ties broken by index.
pub fn top_k(scores: &[f64], k: usize) -> Vec<(u32, f64)> {
    let hits: Vec<(u32, f64)> = scores
        .iter()
        .enumerate()
        .filter(|(_, &s)| s > 0.0)
        .map(|(i, &s)| (i as u32, s))
        .collect();
    select_top(hits, k)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn docs() -> Index {
        Index::build(vec![
            ("d0".to_string(), vec!["cat", "sat", "mat"]),
            ("d1".to_string(), vec!["cat", "cat", "dog", "log", "fog"]),
            ("d2".to_string(), vec!["dog"]),
        ])
    }

    #[test]
    fn scores_equal_a_hand_computed_example() {
        // N = 3, avgdl = (3 + 5 + 1) / 3 = 3, k1 = 1.2, b = 0.75.
        // idf(cat) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln(1.6) = 0.47000362924573563
        // d0: tf 1, dl 3: 1 / (1 + 1.2 * (0.25 + 0.75 * 1)) = 1 / 2.2
        // d1: tf 2, dl 5: 2 / (2 + 1.2 * (0.25 + 0.75 * 5 / 3)) = 2 / 3.8
        let ix = docs();
        let s = ix.scores(&["cat".to_string()], Params::default());
        assert!((s[0] - 0.470_003_629_245_735_63 / 2.2).abs() < 1e-6);
        assert!((s[1] - 0.470_003_629_245_735_63 * 2.0 / 3.8).abs() < 1e-6);
        assert_eq!(s[2], 0.0);
        // "cat dog cat": a repeated term counts twice (Lucene). d2 has dl 1:
        // idf(dog) * 1 / (1 + 1.2 * (0.25 + 0.75 / 3)) = 0.47 / 1.6
        let hits = ix.search(
            &["cat".into(), "dog".into(), "cat".into()],
            10,
            Params::default(),
        );
        let idf = 0.470_003_629_245_735_63;
        let want_d1 = idf * (2.0 * 2.0 / 3.8 + 1.0 / (1.0 + 1.2 * (0.25 + 0.75 * 5.0 / 3.0)));
        assert_eq!(hits[0].0, 1);
        assert!((hits[0].1 - want_d1).abs() < 1e-6);
        assert_eq!(hits.len(), 3);
        // d0 (cat counted twice: 2 * 0.47 / 2.2) now ranks above d2 (0.47 / 1.6).
        assert_eq!(hits[1].0, 0);
        assert!((hits[1].1 - 2.0 * idf / 2.2).abs() < 1e-6, "{hits:?}");
        assert!((hits[2].1 - idf / 1.6).abs() < 1e-6, "{hits:?}");
    }

    #[test]
    fn a_subset_scores_as_an_index_of_its_members_alone() {
        let all = Index::build(vec![
            ("a".to_string(), vec!["cat", "dog"]),
            ("b".to_string(), vec!["cat"]),
            ("c".to_string(), vec!["cat", "cat", "fish"]),
            ("d".to_string(), vec!["dog", "dog", "cat", "eel"]),
            ("e".to_string(), vec!["cat"]),
        ]);
        // Members in another order than the index's: d, b, e (b and e tie).
        let members = [3u32, 1, 4];
        let alone = Index::build(vec![
            ("d".to_string(), vec!["dog", "dog", "cat", "eel"]),
            ("b".to_string(), vec!["cat"]),
            ("e".to_string(), vec!["cat"]),
        ]);
        let sub = Subset::new(all.len(), members.to_vec());
        assert_eq!(sub.df(&all, "cat"), 3);
        assert_eq!(sub.df(&all, "fish"), 0);
        let q: Vec<String> = ["cat", "dog", "fish"].map(String::from).to_vec();
        let got = SubsetSearcher::new(&all, &sub, Params::default()).search(&q, 10);
        let want = alone.search(&q, 10, Params::default());
        assert_eq!(got.len(), want.len());
        for ((d, s), (w, ws)) in got.iter().zip(&want) {
            assert_eq!(members[*w as usize], *d);
            assert_eq!(s.to_bits(), ws.to_bits());
        }
        // The tie between b and e goes to b, first among the members, as alone.
        assert_eq!(got[1].0, 1);
    }

    #[test]
    fn top_k_orders_and_breaks_ties_by_index() {
        assert_eq!(
            top_k(&[0.5, 2.0, 0.5, 0.0, 1.0], 3),
            vec![(1, 2.0), (4, 1.0), (0, 0.5)]
        );
    }
}
