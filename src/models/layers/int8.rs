//! Int8 matrix products for CPU embeddings: weights quantized once per output channel
//! (symmetric, scale max|w| / 127), activations per row at each product (asymmetric: u8 with
//! zero point 128), products summed in i32, then scaled back to f32. On CPUs with AMX (Intel's
//! tile unit, from Sapphire Rapids on) the sums are `tdpbusd` on 16 × 64-byte tiles, 32 rows ×
//! 32 columns at a time; with AVX-512 VNNI they are `vpdpbusd` (64 u8 × i8 products per
//! instruction, 4 rows × 64 columns at a time); with AVX2 they are `vpmaddubsw` on the
//! activations' magnitudes and the weights carrying the activations' signs, widened pairwise by
//! `vpmaddwd` (no pair can saturate: |127 × 127 × 2| < 2^15), 2 rows × 32 columns at a time;
//! elsewhere a portable loop gives the same integers. The sums are exact, so every path gives
//! the same floats bit for bit.
//! Single-threaded: each embedding worker owns a core (see `threads.rs`).

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
    /// Per output, padded to `np` with 0 (a padding column scales to 0).
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
        let mut scales = vec![0f32; np];
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
        self.matmul_with(x, m, self.kernel())
    }

    /// The fastest kernel this CPU and this matrix allow: AMX tiles take inputs in 64-byte
    /// steps, so a `k` off that multiple runs on VNNI.
    fn kernel(&self) -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if self.kp.is_multiple_of(TILE_K) && amx() {
                return Kernel::Amx;
            }
            if vnni() {
                return Kernel::Vnni;
            }
            if avx2() {
                return Kernel::Avx2;
            }
        }
        Kernel::Portable
    }

    /// [`Int8Matrix::matmul`] on the given kernel, which the CPU must have.
    fn matmul_with(&self, x: &[f32], m: usize, kernel: Kernel) -> Vec<f32> {
        assert_eq!(x.len(), m * self.k, "input is not {m} × {}", self.k);
        let rows = if kernel == Kernel::Amx {
            TILE_ROWS
        } else {
            ROWS
        };
        let mp = m.div_ceil(rows) * rows;
        // Each row's scale; a padding row's is 0. The kernels below quantize the rows their own
        // way: u8 with zero point 128 (padding 128, value 0), or signed bytes (padding 0).
        let mut xs = vec![0f32; mp];
        #[cfg(target_arch = "x86_64")]
        if kernel != Kernel::Portable {
            let (k, kp) = (self.k, self.kp);
            let mut out: Vec<f32> = Vec::with_capacity(mp * self.np);
            let o = out.as_mut_ptr();
            // SAFETY: kernel() chose a kernel whose features the CPU has (AMX: and its
            // permission; AMX and VNNI imply AVX-512); every index stays within the padded
            // buffers; each products_* writes every element of the mp × np output, so its length
            // is set after (no zero-filling pass over it first).
            unsafe {
                if kernel == Kernel::Avx2 {
                    // Signed bytes (q − 128) and their magnitudes, made in the quantizing pass;
                    // padding is 0 in both (value 0).
                    let (mut signed, mut magnitude) = (vec![0i8; mp * kp], vec![0u8; mp * kp]);
                    quantize_rows_signed_avx2(x, k, kp, &mut signed, &mut magnitude, &mut xs);
                    self.products_avx2(&signed, &magnitude, &xs, mp, o);
                } else {
                    let mut xq = vec![128u8; mp * kp];
                    quantize_rows_avx512(x, k, kp, &mut xq, &mut xs);
                    if kernel == Kernel::Amx {
                        self.products_amx(&xq, &xs, mp, o);
                    } else {
                        self.products_vnni(&xq, &xs, mp, o);
                    }
                }
                out.set_len(mp * self.np);
            }
            return self.trim(out, m);
        }
        let mut xq = vec![128u8; mp * self.kp];
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
                scale[gb] = _mm512_loadu_ps(self.scales.as_ptr().add(c));
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

    /// The scaled products of every padded row and column on AVX2, 2 rows × 32 columns at a
    /// time (two rows halve the weight loads of one; more rows or columns spill AVX2's 16
    /// registers). The activations come signed (`q − 128`, in −127..=127, see
    /// [`quantize_rows_signed`]), so the sums need no zero-point correction; `vpmaddubsw`
    /// multiplies |x| (unsigned) by w carrying x's sign, adding pairs into i16 exactly, and
    /// `vpmaddwd` by ones adds those pairs into each lane's i32 sum of four products.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn products_avx2(
        &self,
        signed: &[i8],
        magnitude: &[u8],
        xs: &[f32],
        mp: usize,
        out: *mut f32,
    ) {
        use std::arch::x86_64::*;
        const HALF: usize = LANES / 2;
        const ROWS2: usize = 2;
        const GROUPS2: usize = 2;
        let steps = self.kp / 4;
        let w = self.packed.as_ptr();
        let ones = _mm256_set1_epi16(1);
        let (sx, ax) = (signed.as_ptr(), magnitude.as_ptr());
        for g in (0..self.np / LANES).step_by(GROUPS2) {
            let c = g * LANES;
            let mut scale = [_mm256_setzero_ps(); 2 * GROUPS2];
            for (h, v) in scale.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(self.scales.as_ptr().add(c + h * HALF));
            }
            for r0 in (0..mp).step_by(ROWS2) {
                let mut s = [[_mm256_setzero_si256(); 2 * GROUPS2]; ROWS2];
                for t in 0..steps {
                    let mut wv = [_mm256_setzero_si256(); 2 * GROUPS2];
                    for (gb, pair) in wv.chunks_exact_mut(2).enumerate() {
                        let wt = w.add(((g + gb) * steps + t) * LANES * 4) as *const __m256i;
                        pair[0] = _mm256_loadu_si256(wt);
                        pair[1] = _mm256_loadu_si256(wt.add(1));
                    }
                    for (rb, row) in s.iter_mut().enumerate() {
                        let at = (r0 + rb) * self.kp + 4 * t;
                        let xv = _mm256_set1_epi32((sx.add(at) as *const i32).read_unaligned());
                        let av = _mm256_set1_epi32((ax.add(at) as *const i32).read_unaligned());
                        for (h, acc) in row.iter_mut().enumerate() {
                            let pairs = _mm256_maddubs_epi16(av, _mm256_sign_epi8(wv[h], xv));
                            *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(pairs, ones));
                        }
                    }
                }
                for (rb, row) in s.iter().enumerate() {
                    let xr = _mm256_set1_ps(xs[r0 + rb]);
                    for (h, v) in row.iter().enumerate() {
                        let f = _mm256_mul_ps(_mm256_cvtepi32_ps(*v), _mm256_mul_ps(scale[h], xr));
                        _mm256_storeu_ps(out.add((r0 + rb) * self.np + c + h * HALF), f);
                    }
                }
            }
        }
    }

    /// The scaled products of every padded row and column on AMX: for each panel of 256
    /// columns (its weights stay in L2), each block of 32 rows, and each pair of 16-column
    /// groups in the panel, four 16 × 16 i32 tiles summed by `tdpbusd` over 64-byte steps of the
    /// inputs, stored, and scaled back to f32 as [`Int8Matrix::products_vnni`] does. The packed
    /// weights are already in the tile unit's layout: a group's 16 steps of 16 × 4 bytes are
    /// one 16-row, 64-byte tile.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn products_amx(&self, xq: &[u8], xs: &[f32], mp: usize, out: *mut f32) {
        use std::arch::asm;
        use std::arch::x86_64::*;
        const PANEL: usize = 256;
        let config = TileConfig::all(TILE_ROWS / 2, TILE_K);
        asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly));
        let (kp, steps) = (self.kp, self.kp / 4);
        let w = self.packed.as_ptr();
        let zero_point = _mm512_set1_epi32(128);
        let mut acc = TileSums([0; TILE_ROWS * 2 * LANES]);
        for c0 in (0..self.np).step_by(PANEL) {
            for r0 in (0..mp).step_by(TILE_ROWS) {
                let a0 = xq.as_ptr().add(r0 * kp);
                let a1 = a0.add(TILE_ROWS / 2 * kp);
                for c in (c0..(c0 + PANEL).min(self.np)).step_by(2 * LANES) {
                    let b0 = w.add(c / LANES * steps * 4 * LANES);
                    let b1 = b0.add(steps * 4 * LANES);
                    asm!(
                        "tilezero tmm0",
                        "tilezero tmm1",
                        "tilezero tmm2",
                        "tilezero tmm3",
                        options(nostack, nomem)
                    );
                    for kk in (0..kp).step_by(TILE_K) {
                        let b = kk / 4 * 4 * LANES;
                        asm!(
                            "tileloadd tmm4, [{a0} + {sa} * 1]",
                            "tileloadd tmm5, [{a1} + {sa} * 1]",
                            "tileloadd tmm6, [{b0} + {sb} * 1]",
                            "tileloadd tmm7, [{b1} + {sb} * 1]",
                            "tdpbusd tmm0, tmm4, tmm6",
                            "tdpbusd tmm1, tmm4, tmm7",
                            "tdpbusd tmm2, tmm5, tmm6",
                            "tdpbusd tmm3, tmm5, tmm7",
                            a0 = in(reg) a0.add(kk),
                            a1 = in(reg) a1.add(kk),
                            b0 = in(reg) b0.add(b),
                            b1 = in(reg) b1.add(b),
                            sa = in(reg) kp,
                            sb = in(reg) 4 * LANES,
                            options(nostack, readonly)
                        );
                    }
                    let p = acc.0.as_mut_ptr();
                    let half = TILE_ROWS / 2 * 2 * LANES;
                    asm!(
                        "tilestored [{t0} + {s} * 1], tmm0",
                        "tilestored [{t1} + {s} * 1], tmm1",
                        "tilestored [{t2} + {s} * 1], tmm2",
                        "tilestored [{t3} + {s} * 1], tmm3",
                        t0 = in(reg) p,
                        t1 = in(reg) p.add(LANES),
                        t2 = in(reg) p.add(half),
                        t3 = in(reg) p.add(half + LANES),
                        s = in(reg) 2 * LANES * 4,
                        options(nostack)
                    );
                    for gb in 0..2 {
                        let col = c + gb * LANES;
                        let scale = _mm512_loadu_ps(self.scales.as_ptr().add(col));
                        let sums =
                            _mm512_loadu_si512(self.sums.as_ptr().add(col) as *const __m512i);
                        let shift = _mm512_mullo_epi32(sums, zero_point);
                        for rr in 0..TILE_ROWS {
                            let v =
                                _mm512_loadu_si512(acc.0.as_ptr().add(rr * 2 * LANES + gb * LANES)
                                    as *const __m512i);
                            let xr = _mm512_set1_ps(xs[r0 + rr]);
                            let f = _mm512_cvtepi32_ps(_mm512_sub_epi32(v, shift));
                            let f = _mm512_mul_ps(f, _mm512_mul_ps(scale, xr));
                            _mm512_storeu_ps(out.add((r0 + rr) * self.np + col), f);
                        }
                    }
                }
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

/// The integer kernels, fastest first.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kernel {
    Amx,
    Vnni,
    Avx2,
    Portable,
}

/// Rows per AMX block (two tiles of 16) and input bytes per tile row.
const TILE_ROWS: usize = 32;
const TILE_K: usize = 64;

/// The tile unit's configuration (`ldtilecfg`'s 64-byte layout, palette 1).
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// Tiles 0–7, each `rows` rows of `bytes` bytes.
    fn all(rows: usize, bytes: usize) -> TileConfig {
        let mut c = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            bytes_per_row: [0; 16],
            rows: [0; 16],
        };
        for t in 0..8 {
            c.bytes_per_row[t] = bytes as u16;
            c.rows[t] = rows as u8;
        }
        c
    }
}

/// Four stored 16 × 16 tiles of sums: 32 rows of 32 columns.
#[repr(C, align(64))]
struct TileSums([i32; TILE_ROWS * 2 * LANES]);

/// Whether this process may run AMX tile instructions: the CPU has AMX-TILE and AMX-INT8 (and
/// AVX-512 VNNI, for the products' epilogue), and Linux granted the process the tile data state
/// (`ARCH_REQ_XCOMP_PERM`), asked once. `RI_BATCH_NO_AMX` set keeps to VNNI (for comparisons).
#[cfg(target_arch = "x86_64")]
fn amx() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        if std::env::var_os("RI_BATCH_NO_AMX").is_some() || !vnni() {
            return false;
        }
        // CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8.
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        edx & (3 << 24) == 3 << 24 && tile_data_granted()
    })
}

/// Asks Linux for the tile data state; AMX instructions fault without it.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn tile_data_granted() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn tile_data_granted() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn vnni() -> bool {
    std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512f")
}

#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Quantizes each row of `x` (`k` wide) into `xq` (`kp` wide, u8 with zero point 128) and its
/// scale into `xs`; round half away from zero.
#[inline(always)]
fn quantize_rows(x: &[f32], k: usize, kp: usize, xq: &mut [u8], xs: &mut [f32]) {
    for (r, row) in x.chunks_exact(k).enumerate() {
        let inv = row_scale(row, &mut xs[r]);
        for (q, v) in xq[r * kp..r * kp + k].iter_mut().zip(row) {
            *q = to_u8(*v, inv);
        }
    }
}

/// [`quantize_rows`] for the AVX2 kernel: each value as the signed byte `q − 128` (in
/// −127..=127) and its magnitude, in one pass; padding stays 0 in both.
#[inline(always)]
fn quantize_rows_signed(
    x: &[f32],
    k: usize,
    kp: usize,
    signed: &mut [i8],
    magnitude: &mut [u8],
    xs: &mut [f32],
) {
    for (r, row) in x.chunks_exact(k).enumerate() {
        let inv = row_scale(row, &mut xs[r]);
        let span = r * kp..r * kp + k;
        for ((q, a), v) in signed[span.clone()]
            .iter_mut()
            .zip(&mut magnitude[span])
            .zip(row)
        {
            let b = (to_u8(*v, inv) ^ 0x80) as i8;
            *q = b;
            *a = b.unsigned_abs();
        }
    }
}

/// A row's scale (max |x| / 127, or 1 for a zero row), stored in `scale`; returns its inverse.
#[inline(always)]
fn row_scale(row: &[f32], scale: &mut f32) -> f32 {
    let max = super::fast::lanes(row, 0.0, |a, v| a.max(v.abs()));
    *scale = if max > 0.0 { max / 127.0 } else { 1.0 };
    1.0 / *scale
}

/// `v` times `inv`, clamped to ±127 and rounded half away from zero, + 128: an integer in
/// 0..=255, read from the low mantissa bits of its sum with 2^23 (no saturating float → int
/// conversion, which kept the quantizing loops from vectorizing well).
#[inline(always)]
fn to_u8(v: f32, inv: f32) -> u8 {
    let y = (v * inv).clamp(-127.0, 127.0);
    let t = (y + 0.5f32.copysign(y)).trunc() + 128.0;
    (t + 8_388_608.0).to_bits() as u8
}

/// [`quantize_rows`], compiled for AVX-512 so that its loops are vectorized.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_rows_avx512(x: &[f32], k: usize, kp: usize, xq: &mut [u8], xs: &mut [f32]) {
    quantize_rows(x, k, kp, xq, xs)
}

/// [`quantize_rows_signed`], compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_rows_signed_avx2(
    x: &[f32],
    k: usize,
    kp: usize,
    signed: &mut [i8],
    magnitude: &mut [u8],
    xs: &mut [f32],
) {
    quantize_rows_signed(x, k, kp, signed, magnitude, xs)
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
        let portable = q.matmul_with(&x, m, Kernel::Portable);
        assert_eq!(portable.len(), m * n);
        assert!(portable.iter().any(|&v| v != 0.0));
        #[cfg(target_arch = "x86_64")]
        if vnni() {
            assert_eq!(q.matmul_with(&x, m, Kernel::Vnni), portable);
        } else {
            eprintln!("no AVX-512 VNNI here: only the portable path was checked");
        }
    }

    #[test]
    fn the_avx2_path_equals_the_portable_one_bit_for_bit() {
        // Rows off the 4-row block, columns off 16, inputs off 4; weights and activations at
        // full range, so products reach ±127 × 127 (the pairs' i16 sums must not saturate).
        let (m, n, k): (usize, usize, usize) = (11, 70, 390);
        let mut w = random(n * k, 8, 0.5);
        w[0] = 0.5;
        w[1] = -0.5;
        let mut x = random(m * k, 9, 3.0);
        x[0] = 3.0;
        x[1] = -3.0;
        let q = Int8Matrix::quantize(&w, n, k);
        let portable = q.matmul_with(&x, m, Kernel::Portable);
        #[cfg(target_arch = "x86_64")]
        if avx2() {
            assert_eq!(q.matmul_with(&x, m, Kernel::Avx2), portable);
            return;
        }
        eprintln!("no AVX2 here: only the portable path was checked");
    }

    #[test]
    fn the_amx_path_equals_the_portable_one_bit_for_bit() {
        // Rows and columns off the tiles' blocks (45 of 64, 200 of 256); inputs in 64-byte steps.
        let (m, n, k): (usize, usize, usize) = (45, 200, 192);
        let q = Int8Matrix::quantize(&random(n * k, 5, 0.5), n, k);
        let x = random(m * k, 6, 3.0);
        let portable = q.matmul_with(&x, m, Kernel::Portable);
        #[cfg(target_arch = "x86_64")]
        if amx() {
            assert_eq!(q.kernel(), Kernel::Amx);
            assert_eq!(q.matmul_with(&x, m, Kernel::Amx), portable);
            let odd = Int8Matrix::quantize(&random(n * 100, 7, 0.5), n, 100);
            assert_eq!(
                odd.kernel(),
                Kernel::Vnni,
                "k off 64-byte steps stays on VNNI"
            );
            return;
        }
        eprintln!("no AMX here (or RI_BATCH_NO_AMX): the AMX path was not checked");
        assert_eq!(q.matmul(&x, m), portable);
    }

    #[test]
    fn zero_rows_and_weights_give_zero() {
        let q = Int8Matrix::quantize(&[0.0; 8], 2, 4);
        assert_eq!(q.matmul(&[0.0; 4], 1), vec![0.0, 0.0]);
    }
}
