//! Retrieval: BM25 ([`bm25`]), exact cosine search over normalised vectors, and the fusion of a
//! lexical and a dense list by reciprocal rank or by normalised score.

pub mod bm25;

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// How a hybrid variant fuses the lexical and dense lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fusion {
    /// Weighted reciprocal rank fusion: Σ w / (rrf_k + rank).
    Rrf,
    /// Weighted sum of each list's scores, min-max normalised per query and list.
    Score,
}

/// Depth of each input list before fusion.
pub const FUSION_DEPTH: usize = 100;

/// A hybrid variant's fusion of a lexical list `a` and a dense list `b` (chunk id, score; best
/// first) with its `weights` (bm25, dense): weighted reciprocal rank fusion or normalised score
/// fusion. The retrieve stage and `serve` both rank with it.
pub fn fuse_hybrid(
    weights: [f64; 2],
    fusion: Fusion,
    a: Vec<(String, f64)>,
    b: Vec<(String, f64)>,
    rrf_k: f64,
) -> Vec<Fused<String>> {
    match fusion {
        Fusion::Rrf => {
            let ids = |l: Vec<(String, f64)>| l.into_iter().map(|(c, _)| c).collect();
            rrf(&[ids(a), ids(b)], &weights, rrf_k)
        }
        Fusion::Score => score_fusion(&[a, b], &weights),
    }
}

/// Version of [`cosine`]'s arithmetic. Stages that cache dense scores (retrieve's dense and hybrid
/// variants, pack's `unit_dense` ones) key their outputs on it, so a change that moves a score by
/// a rounding step recomputes exactly those. 2: summed in eight lanes (scores moved by up to
/// 6e-7; no rank, pack or evaluation row moved on the README pipelines).
pub const COSINE_VERSION: u32 = 2;

/// Inner product of two vectors (over the shorter one's length): their cosine, as every stored
/// vector is L2-normalised. Summed in eight independent lanes, then the lanes and the tail, so
/// the compiler can keep the products in vector registers (a single running sum cannot be
/// reordered, which left exact search scalar: about 4x slower, `benches/fused_pool.rs`).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    const LANES: usize = 8;
    let n = a.len().min(b.len());
    let (a, b) = (a[..n].chunks_exact(LANES), b[..n].chunks_exact(LANES));
    let tail: f32 = a
        .remainder()
        .iter()
        .zip(b.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = [0f32; LANES];
    for (x, y) in a.zip(b) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    (acc.iter().sum::<f32>() + tail) as f64
}

/// Exact inner-product search of `query` against row-major `vectors` (dims each), restricted to
/// the rows in `allowed` (all when `None`). Vectors are L2-normalised, so this is cosine.
pub fn dense_search(
    query: &[f32],
    vectors: &[f32],
    dims: usize,
    allowed: Option<&[u32]>,
    k: usize,
) -> Vec<(u32, f64)> {
    let score = |i: usize| cosine(&vectors[i * dims..(i + 1) * dims], query);
    let hits: Vec<(u32, f64)> = match allowed {
        Some(rows) => rows.iter().map(|&r| (r, score(r as usize))).collect(),
        None => (0..vectors.len() / dims.max(1))
            .map(|i| (i as u32, score(i)))
            .collect(),
    };
    crate::retrieval::bm25::select_top(hits, k)
}

/// Files ranked by their best chunk: each file key at its first occurrence in `chunks` (best
/// first), with that chunk's score.
pub fn best_chunk_files<'a>(chunks: impl Iterator<Item = (&'a str, f64)>) -> Vec<(String, f64)> {
    let mut seen = std::collections::HashSet::new();
    chunks
        .filter(|(f, _)| seen.insert(*f))
        .map(|(f, s)| (f.to_string(), s))
        .collect()
}

/// Re-scores a chunk list by the ranking of its files: each chunk's score over the list's best,
/// plus `weight` × its file's score over the best file's (0 for a file not ranked). Best first;
/// ties keep the list's order. `chunks` are (chunk id, score, file key).
pub fn file_prior(
    chunks: Vec<(String, f64, String)>,
    files: &[(String, f64)],
    weight: f64,
) -> Vec<(String, f64)> {
    let best = chunks.iter().map(|c| c.1).fold(0.0, f64::max);
    let best_file = files.iter().map(|f| f.1).fold(0.0, f64::max);
    let of: HashMap<&str, f64> = files.iter().map(|(f, s)| (f.as_str(), *s)).collect();
    let norm = |x: f64, m: f64| if m > 0.0 { x / m } else { 0.0 };
    let mut out: Vec<(String, f64)> = chunks
        .into_iter()
        .map(|(id, s, f)| {
            let file = of.get(f.as_str()).copied().unwrap_or(0.0);
            (id, norm(s, best) + weight * norm(file, best_file))
        })
        .collect();
    // A stable sort: equal scores keep the retriever's order.
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// One fused hit: the document, its fused score, and its 1-based rank in each input list.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<T> {
    pub doc: T,
    pub score: f64,
    pub ranks: Vec<Option<u32>>,
}

/// Fuses ranked lists: each document's score is the sum of `gain(list, rank, item)` over the
/// lists it is in (ranks 1-based, its first occurrence in each list). Best first; ties keep the
/// order of first appearance.
fn fuse<T: Clone + Eq + std::hash::Hash, I>(
    lists: &[Vec<I>],
    doc: impl Fn(&I) -> &T,
    gain: impl Fn(usize, u32, &I) -> f64,
) -> Vec<Fused<T>> {
    let mut out: Vec<Fused<T>> = Vec::new();
    // Keyed by the lists' own documents, so each fused document is cloned once, into `out`.
    let mut at: HashMap<&T, usize> = HashMap::new();
    for (li, list) in lists.iter().enumerate() {
        for (r, item) in list.iter().enumerate() {
            let rank = r as u32 + 1;
            let d = doc(item);
            let i = *at.entry(d).or_insert_with(|| {
                out.push(Fused {
                    doc: d.clone(),
                    score: 0.0,
                    ranks: vec![None; lists.len()],
                });
                out.len() - 1
            });
            if out[i].ranks[li].is_none() {
                out[i].ranks[li] = Some(rank);
                out[i].score += gain(li, rank, item);
            }
        }
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    out
}

/// Reciprocal rank fusion: score(d) = Σ_i w_i / (k + rank_i(d)), ranks 1-based; documents absent
/// from a list get nothing from it. Best first; ties keep the order of first appearance.
pub fn rrf<T: Clone + Eq + std::hash::Hash>(
    lists: &[Vec<T>],
    weights: &[f64],
    k: f64,
) -> Vec<Fused<T>> {
    fuse(lists, |d| d, |li, rank, _| weights[li] / (k + rank as f64))
}

/// Normalised score fusion: each list's scores are min-max normalised over that list (1 when all
/// are equal), and score(d) = Σ_i w_i · norm_i(d); a document absent from a list gets nothing
/// from it. Unlike [`rrf`], how far apart two scores are counts, not only their order, so a much
/// weaker list can add its confident hits without pulling the stronger list's order apart.
/// Best first; ties keep the order of first appearance.
pub fn score_fusion<T: Clone + Eq + std::hash::Hash>(
    lists: &[Vec<(T, f64)>],
    weights: &[f64],
) -> Vec<Fused<T>> {
    let range: Vec<(f64, f64)> = lists
        .iter()
        .map(|l| {
            let lo = l.iter().map(|h| h.1).fold(f64::INFINITY, f64::min);
            let hi = l.iter().map(|h| h.1).fold(f64::NEG_INFINITY, f64::max);
            (lo, hi)
        })
        .collect();
    fuse(
        lists,
        |(d, _)| d,
        |li, _, (_, s)| {
            let (lo, hi) = range[li];
            let norm = if hi > lo { (s - lo) / (hi - lo) } else { 1.0 };
            weights[li] * norm
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_equals_its_formula() {
        let a = vec!["x", "y", "z"];
        let b = vec!["z", "w"];
        let f = rrf(&[a, b], &[1.0, 0.5], 60.0);
        let score = |d: &str| f.iter().find(|h| h.doc == d).unwrap().score;
        assert!((score("x") - 1.0 / 61.0).abs() < 1e-12);
        assert!((score("z") - (1.0 / 63.0 + 0.5 / 61.0)).abs() < 1e-12);
        assert!((score("w") - 0.5 / 62.0).abs() < 1e-12);
        assert_eq!(f[0].doc, "z");
        assert_eq!(f[0].ranks, vec![Some(3), Some(1)]);
        assert_eq!(
            f.iter().find(|h| h.doc == "y").unwrap().ranks,
            vec![Some(2), None]
        );
    }

    #[test]
    fn score_fusion_equals_its_formula() {
        let a = vec![("x", 10.0), ("y", 6.0), ("z", 2.0)];
        let b = vec![("z", 0.9), ("w", 0.5), ("v", 0.5)];
        let f = score_fusion(&[a, b], &[0.1, 0.9]);
        let score = |d: &str| f.iter().find(|h| h.doc == d).unwrap().score;
        assert!((score("x") - 0.1).abs() < 1e-12);
        assert!((score("y") - 0.1 * 0.5).abs() < 1e-12);
        assert!((score("z") - 0.9).abs() < 1e-12); // 0.1 · 0 + 0.9 · 1
        assert!(score("w").abs() < 1e-12 && score("v").abs() < 1e-12);
        assert_eq!(f[0].doc, "z");
        assert_eq!(f[0].ranks, vec![Some(3), Some(1)]);
        // Ties keep the order of first appearance: w before v.
        let order: Vec<&str> = f.iter().map(|h| h.doc).collect();
        assert_eq!(order, ["z", "x", "y", "w", "v"]);
        // A list of equal scores counts fully; a zero weight leaves the other list's order.
        let f = score_fusion(
            &[vec![("p", 3.0), ("q", 3.0)], vec![("q", 0.2), ("p", 0.1)]],
            &[1.0, 0.0],
        );
        assert_eq!(f[0].score, 1.0);
        let f = score_fusion(
            &[vec![("p", 3.0), ("q", 1.0)], vec![("q", 0.2), ("p", 0.1)]],
            &[0.0, 1.0],
        );
        assert_eq!(f.iter().map(|h| h.doc).collect::<Vec<_>>(), ["q", "p"]);
    }

    #[test]
    fn cosine_is_the_inner_product_at_every_length() {
        // Lengths around the lane width, MiniLM's and nomic's; values from a fixed generator.
        let mut rng = crate::rng::Rng::new(7);
        let mut draw = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                .collect()
        };
        for n in [0, 1, 7, 8, 9, 15, 16, 17, 384, 768] {
            let (a, b) = (draw(n), draw(n + 3));
            let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            let got = cosine(&a, &b);
            assert!((got - exact).abs() < 1e-5, "n = {n}: {got} against {exact}");
            // The shorter vector decides the length, whichever side it is on.
            assert!((cosine(&b, &a) - got).abs() < 1e-6, "n = {n}");
        }
        assert_eq!(
            cosine(&[0.6, 0.8], &[0.6, 0.8, 5.0]),
            cosine(&[0.6, 0.8], &[0.6, 0.8])
        );
    }

    #[test]
    fn dense_search_is_cosine_on_unit_vectors() {
        let v = [1.0, 0.0, 0.0, 1.0, 0.6, 0.8];
        let hits = dense_search(&[0.6, 0.8], &v, 2, None, 2);
        assert_eq!(hits[0].0, 2);
        assert!((hits[0].1 - 1.0).abs() < 1e-6);
        assert_eq!(hits[1].0, 1);
        let only = dense_search(&[0.6, 0.8], &v, 2, Some(&[0]), 5);
        assert_eq!(only.len(), 1);
    }
}
