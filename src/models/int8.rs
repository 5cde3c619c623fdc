//! Int8 matrix products for CPU embeddings: weights quantized once per output channel
//! (symmetric, scale max|w| / 127), activations per row at each product (asymmetric: u8 with
//! zero point 128), products summed in i32, then scaled back to f32. On CPUs with AVX-512 VNNI
//! the sums are `vpdpbusd` (64 u8 × i8 products per instruction, 4 rows × 64 columns at a time);
//! elsewhere a portable loop gives the same integers. Single-threaded: each embedding worker
//! owns a core (see `threads.rs`).

/// Columns per group (one 512-bit register of i32 sums) and groups per block.
const LANES: usize = 16;
const GROUPS: usize = 4;
/// Rows per block.
const ROWS: usize = 4;

/// A weight matrix (`n` outputs × `k` inputs, PyTorch's `Linear` layout) in int8.
pub struct Int8Matrix {
    n: usize,
    k: usize,
    /// `k` rounded up to 4 (one `vpdpbusd` lane takes 4 bytes).
    kp: usize,
    /// `n` rounded up to `LANES × GROUPS`.
    np: usize,
    /// For each group of 16 outputs and each 4 inputs: 16 × 4 bytes, lane j holding output j's 4.
    packed: Vec<i8>,
    scales: Vec<f32>,
    /// Σ over inputs of each output's int8 weights (the zero point's share of every sum).
    sums: Vec<i32>,
}

impl Int8Matrix {
    /// Quantizes `w` (row-major, `n` × `k`).
    pub fn quantize(w: &[f32], n: usize, k: usize) -> Int8Matrix {
        assert_eq!(w.len(), n * k, "weights are not {n} × {k}");
        let kp = k.div_ceil(4) * 4;
        let block = LANES * GROUPS;
        let np = n.div_ceil(block) * block;
        let steps = kp / 4;
        // Packed: group g, step t (inputs 4t..4t+4), lane j = output 16g + j.
        let mut packed = vec![0i8; np * kp];
        let mut scales = vec![0f32; n];
        let mut sums = vec![0i32; np];
        for o in 0..n {
            let row = &w[o * k..(o + 1) * k];
            let max = row.iter().fold(0f32, |m, x| m.max(x.abs()));
            let s = if max > 0.0 { max / 127.0 } else { 1.0 };
            scales[o] = s;
            let (g, j) = (o / LANES, o % LANES);
            for (i, x) in row.iter().enumerate() {
                let v = (x / s).round().clamp(-127.0, 127.0) as i8;
                packed[((g * steps + i / 4) * LANES + j) * 4 + i % 4] = v;
                sums[o] += v as i32;
            }
        }
        Int8Matrix {
            n,
            k,
            kp,
            np,
            packed,
            scales,
            sums,
        }
    }

    /// `x` (row-major, `m` × `k`) times the transposed weights: `m` × `n`, row-major.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        #[cfg(target_arch = "x86_64")]
        let fast = vnni();
        #[cfg(not(target_arch = "x86_64"))]
        let fast = false;
        self.matmul_with(x, m, fast)
    }

    /// [`Int8Matrix::matmul`] with the VNNI path (`fast`, where the CPU has it) or the portable.
    fn matmul_with(&self, x: &[f32], m: usize, fast: bool) -> Vec<f32> {
        assert_eq!(x.len(), m * self.k, "input is not {m} × {}", self.k);
        let mp = m.div_ceil(ROWS) * ROWS;
        // Each row in u8 with zero point 128; padding rows and columns are 128 (value 0), and a
        // padding row's scale is 0.
        let mut xq = vec![128u8; mp * self.kp];
        let mut xs = vec![0f32; mp];
        #[cfg(target_arch = "x86_64")]
        if fast && vnni() {
            let mut out: Vec<f32> = Vec::with_capacity(mp * self.np);
            // SAFETY: the features are present; every index stays within the padded buffers;
            // products_vnni writes every element of the mp × np output, so its length is set
            // after (no zero-filling pass over it first).
            unsafe {
                quantize_rows_avx512(x, self.k, self.kp, &mut xq, &mut xs);
                self.products_vnni(&xq, &xs, mp, out.as_mut_ptr());
                out.set_len(mp * self.np);
            }
            return self.trim(out, m);
        }
        let mut out = vec![0f32; mp * self.np];
        quantize_rows(x, self.k, self.kp, &mut xq, &mut xs);
        let mut acc = vec![0i32; mp * self.np];
        self.sums_portable(&xq, mp, &mut acc);
        for r in 0..mp {
            for c in 0..self.n {
                let a = acc[r * self.np + c] - 128 * self.sums[c];
                out[r * self.np + c] = xs[r] * self.scales[c] * a as f32;
            }
        }
        self.trim(out, m)
    }

    /// The first `m` rows and `n` columns of a padded product.
    fn trim(&self, mut out: Vec<f32>, m: usize) -> Vec<f32> {
        if self.np == self.n {
            out.truncate(m * self.n);
            return out;
        }
        (0..m)
            .flat_map(|r| out[r * self.np..r * self.np + self.n].iter().copied())
            .collect()
    }

    fn sums_portable(&self, xq: &[u8], mp: usize, acc: &mut [i32]) {
        let steps = self.kp / 4;
        for r in 0..mp {
            let x = &xq[r * self.kp..(r + 1) * self.kp];
            for g in 0..self.np / LANES {
                for j in 0..LANES {
                    let mut s = 0i32;
                    for t in 0..steps {
                        let w = &self.packed[((g * steps + t) * LANES + j) * 4..][..4];
                        for b in 0..4 {
                            s += x[4 * t + b] as i32 * w[b] as i32;
                        }
                    }
                    acc[r * self.np + g * LANES + j] = s;
                }
            }
        }
    }

    /// The scaled products of every padded row and column, summed by `vpdpbusd` 4 rows × 64
    /// columns at a time and scaled back to f32 in registers.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vnni")]
    unsafe fn products_vnni(&self, xq: &[u8], xs: &[f32], mp: usize, out: *mut f32) {
        use std::arch::x86_64::*;
        let steps = self.kp / 4;
        let w = self.packed.as_ptr();
        let x = xq.as_ptr();
        let zero_point = _mm512_set1_epi32(128);
        // Column blocks outside, so a block's weights (kp × 64 bytes) stay in cache over all rows.
        for g0 in (0..self.np / LANES).step_by(GROUPS) {
            let mut scale = [_mm512_setzero_ps(); GROUPS];
            let mut shift = [_mm512_setzero_si512(); GROUPS];
            for gb in 0..GROUPS {
                let c = (g0 + gb) * LANES;
                scale[gb] = _mm512_loadu_ps(self.scales_padded(c).as_ptr());
                let sums = _mm512_loadu_si512(self.sums.as_ptr().add(c) as *const __m512i);
                shift[gb] = _mm512_mullo_epi32(sums, zero_point);
            }
            for r0 in (0..mp).step_by(ROWS) {
                let mut s = [[_mm512_setzero_si512(); GROUPS]; ROWS];
                for t in 0..steps {
                    let mut wv = [_mm512_setzero_si512(); GROUPS];
                    for (gb, v) in wv.iter_mut().enumerate() {
                        *v = _mm512_loadu_si512(
                            w.add(((g0 + gb) * steps + t) * LANES * 4) as *const __m512i
                        );
                    }
                    for (rb, row) in s.iter_mut().enumerate() {
                        let four =
                            (x.add((r0 + rb) * self.kp + 4 * t) as *const i32).read_unaligned();
                        let xv = _mm512_set1_epi32(four);
                        for (gb, acc) in row.iter_mut().enumerate() {
                            *acc = _mm512_dpbusd_epi32(*acc, xv, wv[gb]);
                        }
                    }
                }
                for (rb, row) in s.iter().enumerate() {
                    let xr = _mm512_set1_ps(xs[r0 + rb]);
                    for (gb, v) in row.iter().enumerate() {
                        let f = _mm512_cvtepi32_ps(_mm512_sub_epi32(*v, shift[gb]));
                        let f = _mm512_mul_ps(f, _mm512_mul_ps(scale[gb], xr));
                        let at = (r0 + rb) * self.np + (g0 + gb) * LANES;
                        _mm512_storeu_ps(out.add(at), f);
                    }
                }
            }
        }
    }

    /// 16 output scales from column `c` on, 0 past the last output.
    fn scales_padded(&self, c: usize) -> [f32; LANES] {
        let mut s = [0f32; LANES];
        for (j, v) in s.iter_mut().enumerate() {
            *v = self.scales.get(c + j).copied().unwrap_or(0.0);
        }
        s
    }
}

#[cfg(target_arch = "x86_64")]
fn vnni() -> bool {
    std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512f")
}

/// Quantizes each row of `x` (`k` wide) into `xq` (`kp` wide, u8 with zero point 128) and its
/// scale into `xs`; round half away from zero.
#[inline(always)]
fn quantize_rows(x: &[f32], k: usize, kp: usize, xq: &mut [u8], xs: &mut [f32]) {
    for (r, row) in x.chunks_exact(k).enumerate() {
        let max = super::fast::lanes(row, 0.0, |a, v| a.max(v.abs()));
        let s = if max > 0.0 { max / 127.0 } else { 1.0 };
        xs[r] = s;
        let inv = 1.0 / s;
        for (q, v) in xq[r * kp..r * kp + k].iter_mut().zip(row) {
            let y = (v * inv).clamp(-127.0, 127.0);
            // Round half away from zero, + 128: an integer in 0..=255, read from the low
            // mantissa bits of its sum with 2^23 (no saturating float → int conversion, which
            // kept this loop from vectorizing well).
            let t = (y + 0.5f32.copysign(y)).trunc() + 128.0;
            *q = (t + 8_388_608.0).to_bits() as u8;
        }
    }
}

/// [`quantize_rows`], compiled for AVX-512 so that its loops are vectorized.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_rows_avx512(x: &[f32], k: usize, kp: usize, xq: &mut [u8], xs: &mut [f32]) {
    quantize_rows(x, k, kp, xq, xs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut r = Rng::new(seed);
        (0..n)
            .map(|_| ((r.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale)
            .collect()
    }

    fn exact(w: &[f32], x: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for r in 0..m {
            for c in 0..n {
                out[r * n + c] = (0..k).map(|i| x[r * k + i] * w[c * k + i]).sum();
            }
        }
        out
    }

    #[test]
    fn products_match_f32_within_quantization_error_at_odd_shapes() {
        // Shapes off every block size: rows, columns and inputs all padded.
        for (m, n, k) in [(7, 70, 37), (1, 16, 4), (9, 130, 384)] {
            let w = random(n * k, 1, 0.1);
            let x = random(m * k, 2, 2.0);
            let q = Int8Matrix::quantize(&w, n, k);
            let got = q.matmul(&x, m);
            let want = exact(&w, &x, m, n, k);
            let err: f32 = got.iter().zip(&want).map(|(a, b)| (a - b).powi(2)).sum();
            let norm: f32 = want.iter().map(|b| b * b).sum();
            let rel = (err / norm).sqrt();
            assert!(rel < 0.02, "{m}x{n}x{k}: relative error {rel}");
        }
    }

    #[test]
    fn the_vnni_path_equals_the_portable_one_bit_for_bit() {
        let (m, n, k): (usize, usize, usize) = (13, 200, 100);
        let q = Int8Matrix::quantize(&random(n * k, 3, 0.5), n, k);
        let x = random(m * k, 4, 3.0);
        let portable = q.matmul_with(&x, m, false);
        assert_eq!(portable.len(), m * n);
        assert!(portable.iter().any(|&v| v != 0.0));
        #[cfg(target_arch = "x86_64")]
        if vnni() {
            assert_eq!(q.matmul_with(&x, m, true), portable);
        } else {
            eprintln!("no AVX-512 VNNI here: only the portable path was checked");
        }
    }

    #[test]
    fn zero_rows_and_weights_give_zero() {
        let q = Int8Matrix::quantize(&[0.0; 8], 2, 4);
        assert_eq!(q.matmul(&[0.0; 4], 1), vec![0.0, 0.0]);
    }
}
