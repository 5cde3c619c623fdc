//! Attention over fused query/key/value rows, shared by the CPU encoders: each sequence over its
//! real tokens when the padding is on the right ([`super::kernels::attention`]), else the padded
//! form with one masked softmax pass ([`super::fast::MaskedSoftmax`]).

use super::fast;
use super::kernels;
use candle_core::{DType, Tensor};

/// Query, key and value side by side (rows × 3h, row-major) as three (batch, heads, tokens,
/// head size) tensors, in one pass.
fn heads_of(qkv: &[f32], b: usize, t: usize, heads: usize, d: usize) -> [Vec<f32>; 3] {
    let h = heads * d;
    let mut out = [
        vec![0f32; b * t * h],
        vec![0f32; b * t * h],
        vec![0f32; b * t * h],
    ];
    for (row, src) in qkv.chunks_exact(3 * h).enumerate() {
        let (bi, ti) = (row / t, row % t);
        for (which, dst) in out.iter_mut().enumerate() {
            for hd in 0..heads {
                let from = which * h + hd * d;
                let to = ((bi * heads + hd) * t + ti) * d;
                dst[to..to + d].copy_from_slice(&src[from..from + d]);
            }
        }
    }
    out
}

/// A batch's padding mask as the layers read it, made once per forward: `keep` (batch × tokens,
/// 1 for a real token) and, when every sequence's real tokens come first (right padding, as the
/// embedder pads), their counts.
pub(in crate::models) struct Mask {
    keep: Vec<f32>,
    lens: Option<Vec<usize>>,
}

impl Mask {
    /// The mask of `mask` (batch, tokens), u32 1 or 0.
    pub(in crate::models) fn new(mask: &Tensor) -> candle_core::Result<Mask> {
        let (_, t) = mask.dims2()?;
        let keep = mask.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let lens = kernels::prefix_lengths(&keep, t);
        Ok(Mask { keep, lens })
    }
}

/// The attention context (batch, tokens, heads × d) of fused query/key/value rows: each sequence
/// over its real tokens ([`kernels::attention`]) when the padding is on the right, else the
/// padded, masked form.
pub(in crate::models) fn context(
    qkv: &[f32],
    mask: &Mask,
    (b, heads, t, d): (usize, usize, usize, usize),
    device: &candle_core::Device,
) -> candle_core::Result<Tensor> {
    match &mask.lens {
        Some(lens) => Tensor::from_vec(
            kernels::attention(qkv, lens, t, heads, d),
            (b, t, heads * d),
            device,
        ),
        None => attend(
            heads_of(qkv, b, t, heads, d),
            &mask.keep,
            (b, heads, t, d),
            device,
        ),
    }
}

/// Scaled, masked attention over per-head `q`, `k`, `v` (each batch × heads × tokens × d, as
/// [`heads_of`] lays them out); returns the context as (batch, tokens, heads × d).
fn attend(
    [q, k, v]: [Vec<f32>; 3],
    keep: &[f32],
    (b, heads, t, d): (usize, usize, usize, usize),
    device: &candle_core::Device,
) -> candle_core::Result<Tensor> {
    let [q, k, v] = [q, k, v].map(|v| Tensor::from_vec(v, (b, heads, t, d), device));
    let probs = q?
        .matmul(&k?.t()?)?
        .apply_op1_no_bwd(&fast::MaskedSoftmax {
            keep,
            scale: 1.0 / (d as f32).sqrt(),
        })?;
    probs
        .matmul(&v?)?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((b, t, heads * d))
}
