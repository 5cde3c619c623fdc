//! Products and attention of the CPU f32 forward called straight on gemm: no zero-filled output,
//! no copy of the result into a vector, strided operands read where they lie. Attention runs per
//! sequence over its real tokens only (the unpadded form): query, key and value are read in
//! place from the fused query/key/value product and each head's context is written straight into
//! its columns of the output rows, so the per-head copies, the padded score matrix and the
//! transpose back are gone.

use gemm::Parallelism;

/// How an f32 product is split: over the pool when candle's per-operation threading is on (one
/// embedding worker), else on the calling thread (one single-threaded worker per core).
fn parallelism() -> Parallelism {
    match candle_core::utils::get_num_threads() {
        n if n > 1 => Parallelism::Rayon(n),
        _ => Parallelism::None,
    }
}

/// `lhs` (`m` × `k`, row-major) × `w` (`k` × `n`, row-major) → `m` × `n`, row-major.
pub fn matmul(lhs: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    assert_eq!(lhs.len(), m * k, "left operand of {m} × {k}");
    assert_eq!(w.len(), k * n, "right operand of {k} × {n}");
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    // SAFETY: the operands' extents were checked above; with `read_dst` false gemm writes every
    // element of the m × n destination without reading it, so the length is set after.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            lhs.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism(),
        );
        out.set_len(m * n);
    }
    out
}

/// Scaled dot-product attention of every sequence over its own tokens. `qkv` holds rows of
/// query, key and value side by side (`3 × heads × d` wide), `t` rows to a sequence, of which the
/// first `lens[s]` are real. Returns the context, rows of `heads × d`; a padding row's is zero
/// (nothing reads it but the layers that work row by row).
pub fn attention(qkv: &[f32], lens: &[usize], t: usize, heads: usize, d: usize) -> Vec<f32> {
    let h = heads * d;
    let stride = 3 * h;
    assert_eq!(qkv.len(), lens.len() * t * stride, "query/key/value rows");
    let mut ctx = vec![0f32; lens.len() * t * h];
    let mut scores = vec![0f32; t * t];
    let mut inverse_sums = vec![0f32; t];
    let scale = 1.0 / (d as f32).sqrt();
    for (s, &n) in lens.iter().enumerate() {
        assert!(n <= t, "{n} real tokens in a sequence of {t}");
        if n == 0 {
            continue;
        }
        let rows = &qkv[s * t * stride..];
        for head in 0..heads {
            let (q, k, v) = (head * d, h + head * d, 2 * h + head * d);
            let scores = &mut scores[..n * n];
            // SAFETY: q, k and v are read at rows 0..n of this sequence's rows (each `stride`
            // wide, `d` columns from their offset, inside `rows`); the scores are n × n; the
            // context block is rows 0..n, columns head × d .. + d of this sequence's output rows.
            unsafe {
                // scores = q · kᵀ: kᵀ's (i, j) is k's (j, i).
                gemm::gemm(
                    n,
                    n,
                    d,
                    scores.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    rows[q..].as_ptr(),
                    1,
                    stride as isize,
                    rows[k..].as_ptr(),
                    stride as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
            super::fast::softmax_rows(scores, n, scale, &mut inverse_sums);
            let out = &mut ctx[s * t * h + head * d..];
            unsafe {
                gemm::gemm(
                    n,
                    d,
                    n,
                    out.as_mut_ptr(),
                    1,
                    h as isize,
                    false,
                    scores.as_ptr(),
                    1,
                    n as isize,
                    rows[v..].as_ptr(),
                    1,
                    stride as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
            // The softmax's last step, on the n × d context instead of the n × n weights.
            for (i, inv) in inverse_sums[..n].iter().enumerate() {
                out[i * h..i * h + d].iter_mut().for_each(|v| *v *= inv);
            }
        }
    }
    ctx
}

/// Real tokens of each sequence of a right-padded mask (`keep`, sequences of `t`, 1 for a real
/// token): `None` when some sequence's real tokens do not all come first.
pub fn prefix_lengths(keep: &[f32], t: usize) -> Option<Vec<usize>> {
    keep.chunks_exact(t)
        .map(|row| {
            let n = row.iter().take_while(|k| **k != 0.0).count();
            row[n..].iter().all(|k| *k == 0.0).then_some(n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain triple-loop product, the reference.
    fn naive(a: &[f32], m: usize, k: usize, b: &[f32], n: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
            }
        }
        out
    }

    fn values(len: usize, seed: u32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(2654435761).max(1);
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn the_product_is_the_plain_one() {
        for (m, k, n) in [(1, 1, 1), (7, 13, 5), (64, 384, 96), (3, 40, 1536)] {
            let (a, b) = (values(m * k, 1), values(k * n, 2));
            let got = matmul(&a, m, k, &b, n);
            let want = naive(&a, m, k, &b, n);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-4, "{m}×{k}×{n}: {g} against {w}");
            }
        }
    }

    #[test]
    fn attention_matches_the_padded_masked_form_and_ignores_padding() {
        let (heads, d, t) = (3, 4, 6);
        let h = heads * d;
        let lens = [6, 2, 0, 5];
        let mut qkv = values(lens.len() * t * 3 * h, 3);
        // Padding rows hold garbage: it must not reach a real row.
        let clean = attention(&qkv, &lens, t, heads, d);
        for (s, &n) in lens.iter().enumerate() {
            for r in n..t {
                let row = (s * t + r) * 3 * h;
                qkv[row..row + 3 * h].fill(1e6);
            }
        }
        assert_eq!(attention(&qkv, &lens, t, heads, d), clean);
        // The reference: per head, softmax(q kᵀ / √d) v over the real keys, in f64.
        for (s, &n) in lens.iter().enumerate() {
            for head in 0..heads {
                for i in 0..t {
                    for c in 0..d {
                        let got = clean[(s * t + i) * h + head * d + c];
                        if i >= n {
                            assert_eq!(got, 0.0);
                            continue;
                        }
                        let at = |r: usize, which: usize, c: usize| {
                            qkv[(s * t + r) * 3 * h + which * h + head * d + c] as f64
                        };
                        let logits: Vec<f64> = (0..n)
                            .map(|j| (0..d).map(|e| at(i, 0, e) * at(j, 1, e)).sum::<f64>())
                            .map(|x| x / (d as f64).sqrt())
                            .collect();
                        let max = logits.iter().cloned().fold(f64::MIN, f64::max);
                        let w: Vec<f64> = logits.iter().map(|x| (x - max).exp()).collect();
                        let z: f64 = w.iter().sum();
                        let want: f64 = (0..n).map(|j| w[j] / z * at(j, 2, c)).sum();
                        assert!((got as f64 - want).abs() < 1e-5, "{got} against {want}");
                    }
                }
            }
        }
    }

    #[test]
    fn prefix_lengths_of_right_padding_only() {
        assert_eq!(
            prefix_lengths(&[1., 1., 0., 1., 0., 0.], 3),
            Some(vec![2, 1])
        );
        assert_eq!(prefix_lengths(&[1., 0., 1.], 3), None);
    }
}
