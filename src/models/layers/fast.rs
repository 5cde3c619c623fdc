//! Element-wise f32 kernels of the int8 encoder that candle runs one scalar libm call at a time:
//! the erf GELU (about a quarter of the int8 model's time when it was libm's `erff`) and the
//! attention softmax (`expf`). Each is one scalar definition, branch-free and written with
//! `mul_add`, compiled again for AVX-512 and for AVX2+FMA so that the loops vectorize; fused
//! multiply-adds round the same way everywhere, so every build gives the same bits.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape};

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// e^x, relative error about 2e-7 (Cephes' `expf` polynomial on [-ln 2 / 2, ln 2 / 2]); 0 below
/// -87.3, clamped above 88.7.
#[inline(always)]
fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    // Round to nearest by the 1.5 × 2^23 trick (exact for |n| < 2^22, vectorizes as one add):
    // the sum's low mantissa bits are n itself, so the exponent below needs no float → int
    // conversion (Rust's saturating `as i32` costs compares and blends in every vector).
    let biased = x * LOG2E + 12_582_912.0;
    let n = biased - 12_582_912.0;
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let p = 1.987_569_1e-4f32
        .mul_add(r, 1.398_199_9e-3)
        .mul_add(r, 8.333_452e-3)
        .mul_add(r, 4.166_579_6e-2)
        .mul_add(r, 1.666_666_5e-1)
        .mul_add(r, 0.5);
    let e = p.mul_add(r * r, r) + 1.0;
    // biased's bits are 0x4B40_0000 + n; n + 127 shifted into the exponent field is 2^n.
    f32::from_bits((biased.to_bits().wrapping_sub(0x4B40_0000 - 127)) << 23) * e
}

/// erf(x), absolute error under 2e-7 (Abramowitz and Stegun 7.1.26).
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / 0.327_591_1f32.mul_add(a, 1.0);
    let p = 1.061_405_4f32
        .mul_add(t, -1.453_152)
        .mul_add(t, 1.421_413_8)
        .mul_add(t, -0.284_496_74)
        .mul_add(t, 0.254_829_6)
        * t;
    let y = (-p).mul_add(exp(-a * a), 1.0);
    y.copysign(x)
}

/// GELU with the exact (erf) form, as BERT's `gelu`: x/2 · (1 + erf(x / √2)).
#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[inline(always)]
fn bias_gelu_plain(y: &mut [f32], bias: &[f32], gelu_too: bool) {
    for row in y.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            let s = *v + b;
            *v = if gelu_too { gelu(s) } else { s };
        }
    }
}

/// Defines `$name`, which runs `$plain` compiled for AVX-512 (`$avx512`) or for AVX2+FMA
/// (`$avx2`) where the CPU has them, else as it is.
macro_rules! dispatched {
    ($(#[$m:meta])* pub fn $name:ident / $avx512:ident / $avx2:ident ($($a:ident: $t:ty),*) = $plain:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn $avx512($($a: $t),*) {
            $plain($($a),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2($($a: $t),*) {
            $plain($($a),*)
        }

        $(#[$m])*
        pub fn $name($($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the feature is present.
                    return unsafe { $avx512($($a),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the features are present.
                    return unsafe { $avx2($($a),*) };
                }
            }
            $plain($($a),*)
        }
    };
}

dispatched! {
    /// Adds `bias` to every row of `y` (rows of `bias.len()`), then GELU when `gelu_too`.
    pub fn bias_gelu / bias_gelu_avx512 / bias_gelu_avx2 (y: &mut [f32], bias: &[f32], gelu_too: bool) = bias_gelu_plain
}

/// SiLU as candle's `silu`: x / (1 + e^-x).
#[inline(always)]
fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

#[inline(always)]
fn swiglu_plain(both: &[f32], out: &mut [f32], inner: usize) {
    for (row, o) in both
        .chunks_exact(2 * inner)
        .zip(out.chunks_exact_mut(inner))
    {
        let (value, gate) = row.split_at(inner);
        for ((o, v), g) in o.iter_mut().zip(value).zip(gate) {
            *o = v * silu(*g);
        }
    }
}

dispatched! {
    /// SwiGLU's gating: each row of `both` is a value and a gate of `inner` each side by side;
    /// `out`'s row is value × SiLU(gate).
    pub fn swiglu / swiglu_avx512 / swiglu_avx2 (both: &[f32], out: &mut [f32], inner: usize) = swiglu_plain
}

/// Lanes of the explicit partial folds: the same order in every build, and one AVX-512 register
/// wide, so the reductions vectorize without reassociation.
const W: usize = 16;

/// `v` folded by `f` from `init` in W lanes (element i into lane i mod W), then the lanes folded
/// in order: for a maximum exact in any order, for a sum the same order in every build.
#[inline(always)]
pub(super) fn lanes(v: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; W];
    let (body, tail) = v.split_at(v.len() / W * W);
    for c in body.chunks_exact(W) {
        for j in 0..W {
            acc[j] = f(acc[j], c[j]);
        }
    }
    for (j, x) in tail.iter().enumerate() {
        acc[j] = f(acc[j], *x);
    }
    acc.iter().fold(init, |a, b| f(a, *b))
}

/// Scales `v` so that it sums to 1.
#[inline(always)]
fn normalize(v: &mut [f32]) {
    let inv = 1.0 / lanes(v, 0.0, |a, x| a + x);
    for o in v.iter_mut() {
        *o *= inv;
    }
}

/// One row's softmax of `scale` × `scores`, keys whose `keep` is 0 given probability 0.
#[inline(always)]
fn softmax_row(scores: &[f32], keep: &[f32], scale: f32, out: &mut [f32]) {
    for ((o, s), k) in out.iter_mut().zip(scores).zip(keep) {
        *o = if *k != 0.0 {
            s * scale
        } else {
            f32::NEG_INFINITY
        };
    }
    let max = lanes(out, f32::NEG_INFINITY, f32::max);
    for ((o, s), k) in out.iter_mut().zip(scores).zip(keep) {
        let e = exp(s.mul_add(scale, -max));
        *o = if *k != 0.0 { e } else { 0.0 };
    }
    normalize(out);
}

/// How many keys of a batch's mask are kept, when the kept ones come first (right padding, as
/// the embedder pads); `None` for any other mask.
#[inline(always)]
fn kept_prefix(keep: &[f32]) -> Option<usize> {
    let n = keep.iter().take_while(|k| **k != 0.0).count();
    keep[n..].iter().all(|k| *k == 0.0).then_some(n)
}

/// [`softmax_row`] over the first `n` keys, the rest at probability 0: no mask test per key.
#[inline(always)]
fn softmax_prefix(scores: &[f32], n: usize, scale: f32, out: &mut [f32]) {
    let (kept, padded) = out.split_at_mut(n);
    // scale > 0 and rounding is monotonic, so this is the largest scaled score, exactly.
    let max = lanes(&scores[..n], f32::NEG_INFINITY, f32::max) * scale;
    for (o, s) in kept.iter_mut().zip(scores) {
        *o = exp(s.mul_add(scale, -max));
    }
    normalize(kept);
    padded.fill(0.0);
}

#[inline(always)]
fn softmax_plain(
    scores: &[f32],
    keep: &[f32],
    keys: usize,
    rows_per_batch: usize,
    out: &mut [f32],
    scale: f32,
) {
    let prefixes: Vec<Option<usize>> = keep.chunks_exact(keys).map(kept_prefix).collect();
    for (i, (row, o)) in scores
        .chunks_exact(keys)
        .zip(out.chunks_exact_mut(keys))
        .enumerate()
    {
        let b = i / rows_per_batch;
        match prefixes[b] {
            Some(n) if n > 0 => softmax_prefix(row, n, scale, o),
            _ => softmax_row(row, &keep[b * keys..(b + 1) * keys], scale, o),
        }
    }
}

dispatched! {
    /// Every row's softmax (`keys` wide, `rows_per_batch` rows to a batch's mask in `keep`).
    pub fn softmax / softmax_avx512 / softmax_avx2 (scores: &[f32], keep: &[f32], keys: usize, rows_per_batch: usize, out: &mut [f32], scale: f32) = softmax_plain
}

#[inline(always)]
fn softmax_rows_plain(rows: &mut [f32], keys: usize, scale: f32, inverse_sums: &mut [f32]) {
    for (row, inv) in rows.chunks_exact_mut(keys).zip(inverse_sums) {
        // scale > 0 and rounding is monotonic, so this is the largest scaled score, exactly.
        let max = lanes(row, f32::NEG_INFINITY, f32::max) * scale;
        for v in row.iter_mut() {
            *v = exp(v.mul_add(scale, -max));
        }
        *inv = 1.0 / lanes(row, 0.0, |a, x| a + x);
    }
}

dispatched! {
    /// Every row's softmax of `scale` × its scores (rows of `keys`, every key kept), all but the
    /// last step: the row holds the exponentials and `inverse_sums` its 1 / sum, by which the
    /// caller scales what it computes from the row (a softmax row times the inverse is
    /// [`softmax`]'s, bit for bit). Attention scales its d-wide output instead of the n-wide row.
    pub fn softmax_rows / softmax_rows_avx512 / softmax_rows_avx2 (rows: &mut [f32], keys: usize, scale: f32, inverse_sums: &mut [f32]) = softmax_rows_plain
}

/// The attention softmax as a candle op on scores (batch, heads, queries, keys): each row scaled
/// by `scale`, keys outside the mask (`keep`, batch × keys, 1 or 0) at probability 0. Replaces
/// candle's divide, mask add and softmax (three passes, libm's `expf`) with one pass.
pub struct MaskedSoftmax<'a> {
    pub keep: &'a [f32],
    pub scale: f32,
}

impl CustomOp1 for MaskedSoftmax<'_> {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, h, q, k) = layout.shape().dims4()?;
        let (start, end) = layout.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg("masked-softmax: scores not contiguous".into())
        })?;
        let CpuStorage::F32(all) = storage else {
            return Err(candle_core::Error::Msg(
                "masked-softmax: scores not f32".into(),
            ));
        };
        if self.keep.len() != b * k {
            return Err(candle_core::Error::Msg(format!(
                "masked-softmax: mask of {} for {b} × {k} keys",
                self.keep.len()
            )));
        }
        let scores = &all[start..end];
        let mut out = vec![0f32; scores.len()];
        softmax(scores, self.keep, k, h * q, &mut out, self.scale);
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_erf_follow_libm_closely() {
        let mut worst_exp = 0f32;
        let mut worst_erf = 0f32;
        for i in -4000..=4000 {
            let x = i as f32 / 400.0; // -10 … 10
            let e = (x as f64).exp() as f32;
            worst_exp = worst_exp.max(((exp(x) - e) / e).abs());
            worst_erf = worst_erf.max((erf(x) - libm::erff(x)).abs());
        }
        assert!(worst_exp < 4e-7, "exp relative error {worst_exp}");
        assert!(worst_erf < 4e-7, "erf absolute error {worst_erf}");
        assert_eq!(exp(-200.0), 0.0f32.max(exp(-200.0)));
        assert!(exp(-200.0) < 1e-37);
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(-12.0), -1.0);
    }

    #[test]
    fn bias_gelu_matches_the_erf_definition_on_every_path() {
        let bias = [0.5f32, -1.0, 2.0];
        let mut y: Vec<f32> = (0..30).map(|i| (i as f32 - 15.0) / 3.0).collect();
        let want: Vec<f32> = y
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let s = (*v + bias[i % 3]) as f64;
                (0.5 * s * (1.0 + libm::erf(s / std::f64::consts::SQRT_2))) as f32
            })
            .collect();
        let mut plain = y.clone();
        bias_gelu_plain(&mut plain, &bias, true);
        bias_gelu(&mut y, &bias, true);
        assert_eq!(
            y, plain,
            "the vectorized and plain builds agree bit for bit"
        );
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            let mut avx2 = (0..30)
                .map(|i| (i as f32 - 15.0) / 3.0)
                .collect::<Vec<f32>>();
            // SAFETY: the features are present.
            unsafe { bias_gelu_avx2(&mut avx2, &bias, true) };
            assert_eq!(avx2, plain, "the AVX2 build agrees bit for bit");
        }
        for (g, w) in y.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} against {w}");
        }
    }

    #[test]
    fn row_softmax_times_its_inverse_sum_is_the_masked_one_with_every_key_kept() {
        let (rows, k) = (6, 7);
        let data: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 29) % 13) as f32 - 6.0)
            .collect();
        let mut masked = vec![0f32; data.len()];
        softmax(&data, &[1.0; 7], k, rows, &mut masked, 0.3);
        let scaled = |mut rows: Vec<f32>, inv: &[f32]| {
            for (row, i) in rows.chunks_exact_mut(k).zip(inv) {
                row.iter_mut().for_each(|v| *v *= i);
            }
            rows
        };
        let (mut in_place, mut inv) = (data.clone(), vec![0f32; rows]);
        softmax_rows(&mut in_place, k, 0.3, &mut inv);
        assert_eq!(scaled(in_place, &inv), masked);
        let (mut plain, mut inv) = (data, vec![0f32; rows]);
        softmax_rows_plain(&mut plain, k, 0.3, &mut inv);
        assert_eq!(
            scaled(plain, &inv),
            masked,
            "every build agrees bit for bit"
        );
    }

    #[test]
    fn masked_softmax_sums_to_one_over_kept_keys_and_equals_the_plain_build() {
        use candle_core::{Device, Tensor};
        let (b, h, q, k) = (3, 3, 4, 5);
        let data: Vec<f32> = (0..b * h * q * k)
            .map(|i| ((i * 37) % 11) as f32 - 5.0)
            .collect();
        // Right padding (the fast path), no padding, and a mask with a hole (the general one).
        let keep = vec![1., 1., 1., 0., 0., 1., 1., 1., 1., 1., 1., 0., 1., 1., 0.];
        let t = Tensor::from_vec(data.clone(), (b, h, q, k), &Device::Cpu).unwrap();
        let op = MaskedSoftmax {
            keep: &keep,
            scale: 0.25,
        };
        let got = t
            .apply_op1_no_bwd(&op)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let mut plain = vec![0f32; data.len()];
        softmax_plain(&data, &keep, k, h * q, &mut plain, 0.25);
        assert_eq!(got, plain);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            let mut avx2 = vec![0f32; data.len()];
            // SAFETY: the features are present.
            unsafe { softmax_avx2(&data, &keep, k, h * q, &mut avx2, 0.25) };
            assert_eq!(avx2, plain, "the AVX2 build agrees bit for bit");
        }
        for (r, row) in got.chunks(k).enumerate() {
            let batch = r / (h * q);
            let sum: f32 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-6, "row {r} sums to {sum}");
            for (j, p) in row.iter().enumerate() {
                assert_eq!(
                    *p == 0.0,
                    keep[batch * k + j] == 0.0,
                    "row {r} key {j}: {p}"
                );
            }
            // Against the definition, in f64.
            let src = &data[r * k..(r + 1) * k];
            let m = src
                .iter()
                .zip(&keep[batch * k..])
                .filter(|(_, k)| **k != 0.0)
                .map(|(s, _)| *s as f64 * 0.25)
                .fold(f64::MIN, f64::max);
            let z: f64 = src
                .iter()
                .zip(&keep[batch * k..])
                .filter(|(_, k)| **k != 0.0)
                .map(|(s, _)| (*s as f64 * 0.25 - m).exp())
                .sum();
            for (j, p) in row.iter().enumerate() {
                if keep[batch * k + j] != 0.0 {
                    let want = ((src[j] as f64 * 0.25 - m).exp() / z) as f32;
                    assert!((p - want).abs() < 1e-6, "{p} against {want}");
                }
            }
        }
    }

    #[test]
    fn swiglu_gates_each_value_by_the_silu_of_its_gate_on_every_path() {
        let inner = 5;
        let both: Vec<f32> = (0..3 * 2 * inner)
            .map(|i| (i as f32 - 14.0) / 2.5)
            .collect();
        let mut plain = vec![0f32; 3 * inner];
        swiglu_plain(&both, &mut plain, inner);
        let mut got = vec![0f32; 3 * inner];
        swiglu(&both, &mut got, inner);
        assert_eq!(
            got, plain,
            "the vectorized and plain builds agree bit for bit"
        );
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            let mut avx2 = vec![0f32; 3 * inner];
            // SAFETY: the features are present.
            unsafe { swiglu_avx2(&both, &mut avx2, inner) };
            assert_eq!(avx2, plain, "the AVX2 build agrees bit for bit");
        }
        for (r, row) in both.chunks(2 * inner).enumerate() {
            for j in 0..inner {
                let (v, g) = (row[j] as f64, row[inner + j] as f64);
                let want = (v * g / (1.0 + (-g).exp())) as f32;
                let o = got[r * inner + j];
                assert!(
                    (o - want).abs() <= 1e-6 * want.abs().max(1.0),
                    "{o} against {want}"
                );
            }
        }
    }
}
