//! BERT-family encoders on the CPU with ri-batch's own forward pass, for f32 and for int8 linear
//! layers (`[embed] dtype = "int8"`: weights quantized at load, `int8.rs`: per output channel,
//! activations per row at each product). Query, key and value are one product; the bias and the
//! erf GELU are added in place after each product and the attention softmax is one pass
//! (`fast.rs`), where candle's BERT spends a quarter of its time in libm's `erff` and `expf` and
//! in separate element-wise passes. Embeddings, layer norms and the attention products stay in
//! candle. Same weights and same forward as `candle_transformers::models::bert`: f32 vectors agree
//! with sentence-transformers' to about 3e-7 per element, int8 ones with f32 to quantization error (`tests/embed.rs`).

use super::bert::{open_weights, read_config};
use super::fast;
use super::int8::Int8Matrix;
use super::kernels;
use super::Backend;
use crate::error::{Error, Result};
use candle_core::{CpuStorage, DType, Module, Tensor};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};
use std::path::Path;

/// A linear layer's weights: int8 (quantized at load), or f32 transposed once to inputs ×
/// outputs (row-major) for gemm.
enum Weights {
    Int8(Int8Matrix),
    F32(Vec<f32>),
}

/// A linear layer with an f32 bias (several layers' weights side by side when they read the
/// same input: query, key and value are one product).
pub(super) struct Linear {
    weight: Weights,
    inputs: usize,
    /// One per output (zeros for a layer without one).
    bias: Vec<f32>,
    /// Whether the layer has a bias: without one, a product without GELU skips the bias pass.
    biased: bool,
}

impl Linear {
    fn load(
        vb: VarBuilder,
        inputs: usize,
        outputs: usize,
        int8: bool,
    ) -> candle_core::Result<Linear> {
        Self::load_side_by_side(&[vb], inputs, outputs, int8, true)
    }

    /// The layers of `vbs`, each `inputs` → `outputs`, as one of `inputs` → n × `outputs`, with
    /// their `bias` tensors where `biased`. Each output channel is quantized on its own, so the
    /// products are those of the layers apart.
    pub(super) fn load_side_by_side(
        vbs: &[VarBuilder],
        inputs: usize,
        outputs: usize,
        int8: bool,
        biased: bool,
    ) -> candle_core::Result<Linear> {
        let (mut w, mut bias) = (Vec::new(), Vec::new());
        for vb in vbs {
            w.extend(
                vb.get((outputs, inputs), "weight")?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            );
            if biased {
                bias.extend(vb.get(outputs, "bias")?.to_vec1::<f32>()?);
            } else {
                bias.resize(bias.len() + outputs, 0.0);
            }
        }
        let n = vbs.len() * outputs;
        let weight = if int8 {
            Weights::Int8(Int8Matrix::quantize(&w, n, inputs))
        } else {
            let w = Tensor::from_vec(w, (n, inputs), &candle_core::Device::Cpu)?;
            Weights::F32(w.t()?.contiguous()?.flatten_all()?.to_vec1::<f32>()?)
        };
        Ok(Linear {
            weight,
            inputs,
            bias,
            biased,
        })
    }

    /// `x` (batch, tokens, inputs) → its rows' products (rows × outputs, row-major), the bias
    /// added and GELU after it when `gelu`.
    pub(super) fn product(&self, x: &Tensor, gelu: bool) -> candle_core::Result<Vec<f32>> {
        let (b, t, _) = x.dims3()?;
        let mut y = match &self.weight {
            Weights::Int8(m) => with_rows(x, |rows| m.matmul(rows, b * t))?,
            Weights::F32(wt) => with_rows(x, |rows| {
                kernels::matmul(rows, b * t, self.inputs, wt, self.bias.len())
            })?,
        };
        if self.biased || gelu {
            fast::bias_gelu(&mut y, &self.bias, gelu);
        }
        Ok(y)
    }

    /// `x` (batch, tokens, inputs) → (batch, tokens, outputs).
    pub(super) fn forward(&self, x: &Tensor, gelu: bool) -> candle_core::Result<Tensor> {
        let (b, t, k) = x.dims3()?;
        debug_assert_eq!(k, self.inputs);
        Tensor::from_vec(self.product(x, gelu)?, (b, t, self.bias.len()), x.device())
    }
}

/// Runs `f` on a contiguous f32 tensor's values in place in its storage (no copy), or on a copy
/// where the tensor is not laid out that way.
fn with_rows<T>(x: &Tensor, f: impl FnOnce(&[f32]) -> T) -> candle_core::Result<T> {
    let (storage, layout) = x.storage_and_layout();
    if let (candle_core::Storage::Cpu(CpuStorage::F32(all)), Some((from, to))) =
        (&*storage, layout.contiguous_offsets())
    {
        return Ok(f(&all[from..to]));
    }
    drop(storage);
    Ok(f(&x.flatten_all()?.to_vec1::<f32>()?))
}

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
pub(super) struct Mask {
    keep: Vec<f32>,
    lens: Option<Vec<usize>>,
}

impl Mask {
    /// The mask of `mask` (batch, tokens), u32 1 or 0.
    pub(super) fn new(mask: &Tensor) -> candle_core::Result<Mask> {
        let (_, t) = mask.dims2()?;
        let keep = mask.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        let lens = kernels::prefix_lengths(&keep, t);
        Ok(Mask { keep, lens })
    }
}

/// The attention context (batch, tokens, heads × d) of fused query/key/value rows: each sequence
/// over its real tokens ([`kernels::attention`]) when the padding is on the right, else the
/// padded, masked form.
pub(super) fn context(
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

struct Layer {
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

impl Layer {
    fn load(vb: VarBuilder, c: &Config, int8: bool) -> candle_core::Result<Layer> {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let a = vb.pp("attention");
        let eps = c.layer_norm_eps;
        let me = a.pp("self");
        let qkv = [me.pp("query"), me.pp("key"), me.pp("value")];
        Ok(Layer {
            qkv: Linear::load_side_by_side(&qkv, h, h, int8, true)?,
            attention_out: Linear::load(a.pp("output").pp("dense"), h, h, int8)?,
            attention_norm: layer_norm(h, eps, a.pp("output").pp("LayerNorm"))?,
            intermediate: Linear::load(vb.pp("intermediate").pp("dense"), h, i, int8)?,
            output: Linear::load(vb.pp("output").pp("dense"), i, h, int8)?,
            output_norm: layer_norm(h, eps, vb.pp("output").pp("LayerNorm"))?,
        })
    }

    /// One encoder layer over `x` (batch, tokens, hidden) under the batch's `mask`.
    fn forward(&self, x: &Tensor, mask: &Mask, c: &Config) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let heads = c.num_attention_heads;
        let qkv = self.qkv.product(x, false)?;
        let ctx = context(&qkv, mask, (b, heads, t, h / heads), x.device())?;
        let x = self
            .attention_norm
            .forward(&(self.attention_out.forward(&ctx, false)? + x)?)?;
        let mid = match c.hidden_act {
            HiddenAct::Gelu => self.intermediate.forward(&x, true)?,
            HiddenAct::GeluApproximate => self.intermediate.forward(&x, false)?.gelu()?,
            HiddenAct::Relu => self.intermediate.forward(&x, false)?.relu()?,
        };
        self.output_norm
            .forward(&(self.output.forward(&mid, false)? + x)?)
    }
}

/// The encoder; `int8` chooses the linear layers' weights.
pub struct FusedBert {
    words: Embedding,
    positions: Embedding,
    types: Embedding,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    config: Config,
}

impl FusedBert {
    /// Loads the f32 weights of `weights`; with `int8`, quantizes every linear layer's.
    pub fn load(
        dir: &Path,
        config: &serde_json::Value,
        weights: &Path,
        int8: bool,
    ) -> Result<FusedBert> {
        let cfg = read_config(dir, config)?;
        let vb = open_weights(weights, DType::F32, &candle_core::Device::Cpu)?;
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        Self::build(vb, cfg, int8).map_err(|e| Error::model(weights, e))
    }

    fn build(vb: VarBuilder, c: Config, int8: bool) -> candle_core::Result<FusedBert> {
        let e = vb.pp("embeddings");
        let h = c.hidden_size;
        let layers = (0..c.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("encoder").pp(format!("layer.{i}")), &c, int8))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(FusedBert {
            words: embedding(c.vocab_size, h, e.pp("word_embeddings"))?,
            positions: embedding(c.max_position_embeddings, h, e.pp("position_embeddings"))?,
            types: embedding(c.type_vocab_size, h, e.pp("token_type_embeddings"))?,
            embed_norm: layer_norm(h, c.layer_norm_eps, e.pp("LayerNorm"))?,
            layers,
            config: c,
        })
    }
}

impl Backend for FusedBert {
    fn hidden(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (_, t) = ids.dims2()?;
        let positions = Tensor::arange(0u32, t as u32, ids.device())?;
        let x = (self.words.forward(ids)? + self.types.forward(&ids.zeros_like()?)?)?
            .broadcast_add(&self.positions.forward(&positions)?)?;
        let mut x = self.embed_norm.forward(&x)?;
        // A padded key gets probability 0 (candle's BERT adds f32::MIN to its score: the same).
        let mask = Mask::new(mask)?;
        for layer in &self.layers {
            x = layer.forward(&x, &mask, &self.config)?;
        }
        Ok(x)
    }
    fn hidden_size(&self) -> usize {
        self.config.hidden_size
    }
    fn max_positions(&self) -> usize {
        self.config.max_position_embeddings
    }
}
