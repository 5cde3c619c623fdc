//! NomicBERT (nomic-embed-text v1 / v1.5) on the CPU with ri-batch's own forward pass, f32 or int8
//! linear layers, as `bert_fused.rs` does for the BERT family: the fused query/key/value product,
//! rotary positions applied in place to query and key, the one-pass masked softmax, and SwiGLU's
//! two input products as one with the gate applied in the same pass (`fast::swiglu`). The same
//! weights and forward as `candle_transformers::models::nomic_bert` (post- or pre-norm, optional
//! biases, interleaved or half-split rotary); `tests/embed.rs` checks it against an independent
//! numpy forward pass of a model it builds.

use super::layers::{context, fast, Linear, Mask};
use super::Backend;
use crate::error::{Error, Result};
use candle_core::{DType, Module, Tensor};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::nomic_bert::Config;
use std::path::Path;

/// Rotary position tables (positions × half the head size), computed as candle's are.
struct Rotary {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
    interleaved: bool,
}

impl Rotary {
    fn new(dim: usize, positions: usize, base: f64, interleaved: bool) -> Rotary {
        let half = dim / 2;
        let inv: Vec<f32> = (0..half)
            .map(|i| 1f32 / (base as f32).powf(2.0 * i as f32 / dim as f32))
            .collect();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for f in &inv {
                let a = p as f32 * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Rotary {
            cos,
            sin,
            half,
            interleaved,
        }
    }

    /// Rotates one head's `v` (head size wide) of the token at position `p`, in place.
    fn rotate(&self, v: &mut [f32], p: usize) {
        let (cos, sin) = (
            &self.cos[p * self.half..(p + 1) * self.half],
            &self.sin[p * self.half..(p + 1) * self.half],
        );
        for i in 0..self.half {
            let (a, b) = if self.interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + self.half)
            };
            let (x1, x2) = (v[a], v[b]);
            v[a] = x1 * cos[i] - x2 * sin[i];
            v[b] = x1 * sin[i] + x2 * cos[i];
        }
    }

    /// Rotates the query and key heads of fused query/key/value rows (`t` rows to a sequence,
    /// query, key and value side by side) in place: [`Rotary::apply`]'s arithmetic where the
    /// product left them.
    fn apply_rows(&self, qkv: &mut [f32], t: usize, h: usize) {
        for (row, r) in qkv.chunks_exact_mut(3 * h).enumerate() {
            for v in r[..2 * h].chunks_exact_mut(2 * self.half) {
                self.rotate(v, row % t);
            }
        }
    }
}

struct Block {
    qkv: Linear,
    out: Linear,
    norm1: LayerNorm,
    /// fc11 (the value) and fc12 (the gate) side by side.
    fc1: Linear,
    fc2: Linear,
    norm2: LayerNorm,
}

impl Block {
    fn load(vb: VarBuilder, c: &Config, int8: bool) -> candle_core::Result<Block> {
        let (h, i) = (c.n_embd, c.n_inner);
        let (attn, mlp) = (vb.pp("attn"), vb.pp("mlp"));
        let eps = c.layer_norm_epsilon;
        Ok(Block {
            qkv: Linear::load_side_by_side(&[attn.pp("Wqkv")], h, 3 * h, int8, c.qkv_proj_bias)?,
            out: Linear::load_side_by_side(&[attn.pp("out_proj")], h, h, int8, c.qkv_proj_bias)?,
            norm1: layer_norm(h, eps, vb.pp("norm1"))?,
            fc1: Linear::load_side_by_side(
                &[mlp.pp("fc11"), mlp.pp("fc12")],
                h,
                i,
                int8,
                c.mlp_fc1_bias,
            )?,
            fc2: Linear::load_side_by_side(&[mlp.pp("fc2")], i, h, int8, c.mlp_fc2_bias)?,
            norm2: layer_norm(h, eps, vb.pp("norm2"))?,
        })
    }

    fn attention(
        &self,
        x: &Tensor,
        mask: &Mask,
        rotary: &Rotary,
        heads: usize,
    ) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let mut qkv = self.qkv.product(x, false)?;
        rotary.apply_rows(&mut qkv, t, h);
        let ctx = context(&qkv, mask, (b, heads, t, h / heads), x.device())?;
        self.out.forward(&ctx, false)
    }

    fn mlp(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let both = self.fc1.product(x, false)?;
        let inner = both.len() / (b * t) / 2;
        let mut gated = vec![0f32; b * t * inner];
        fast::swiglu(&both, &mut gated, inner);
        let gated = Tensor::from_vec(gated, (b, t, inner), x.device())?;
        self.fc2.forward(&gated, false)
    }

    fn forward(
        &self,
        x: &Tensor,
        mask: &Mask,
        rotary: &Rotary,
        c: &Config,
    ) -> candle_core::Result<Tensor> {
        if c.prenorm {
            let x = (x + self.attention(&self.norm1.forward(x)?, mask, rotary, c.n_head)?)?;
            &x + self.mlp(&self.norm2.forward(&x)?)?
        } else {
            let x = self
                .norm1
                .forward(&(x + self.attention(x, mask, rotary, c.n_head)?)?)?;
            self.norm2.forward(&(&x + self.mlp(&x)?)?)
        }
    }
}

/// The encoder; `int8` chooses the linear layers' weights.
pub struct FusedNomic {
    words: Embedding,
    types: Option<Embedding>,
    emb_ln: LayerNorm,
    blocks: Vec<Block>,
    rotary: Rotary,
    config: Config,
}

impl FusedNomic {
    /// Loads `weights` (f32 on the CPU); with `int8`, quantizes every linear layer's.
    pub fn load(
        dir: &Path,
        config: &serde_json::Value,
        weights: &Path,
        int8: bool,
    ) -> Result<FusedNomic> {
        let c = super::nomic::read_config(dir, config)?;
        let d = c.n_embd / c.n_head;
        if (d as f64 * c.rotary_emb_fraction) as usize != d {
            return Err(Error::model(
                dir.join("config.json"),
                format!(
                    "rotary_emb_fraction {} is not supported (1.0 only)",
                    c.rotary_emb_fraction
                ),
            ));
        }
        let vb = super::bert::open_weights(weights, DType::F32, &candle_core::Device::Cpu)?;
        let vb = match &c.model_type {
            Some(p) if !vb.contains_tensor("emb_ln.weight") => vb.pp(p),
            _ => vb,
        };
        Self::build(vb, c, int8).map_err(|e| Error::model(weights, e))
    }

    fn build(vb: VarBuilder, c: Config, int8: bool) -> candle_core::Result<FusedNomic> {
        let e = vb.pp("embeddings");
        let h = c.n_embd;
        let blocks = (0..c.n_layer)
            .map(|i| Block::load(vb.pp("encoder").pp(format!("layers.{i}")), &c, int8))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let types = (c.type_vocab_size > 0)
            .then(|| embedding(c.type_vocab_size, h, e.pp("token_type_embeddings")))
            .transpose()?;
        Ok(FusedNomic {
            words: embedding(c.vocab_size, h, e.pp("word_embeddings"))?,
            types,
            emb_ln: layer_norm(h, c.layer_norm_epsilon, vb.pp("emb_ln"))?,
            blocks,
            rotary: Rotary::new(
                h / c.n_head,
                c.n_positions,
                c.rotary_emb_base,
                c.rotary_emb_interleaved,
            ),
            config: c,
        })
    }
}

impl Backend for FusedNomic {
    fn hidden(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = self.words.forward(ids)?;
        if let Some(types) = &self.types {
            x = (x + types.forward(&ids.zeros_like()?)?)?;
        }
        let mut x = self.emb_ln.forward(&x)?;
        let mask = Mask::new(mask)?;
        for block in &self.blocks {
            x = block.forward(&x, &mask, &self.rotary, &self.config)?;
        }
        Ok(x)
    }
    fn hidden_size(&self) -> usize {
        self.config.n_embd
    }
    fn max_positions(&self) -> usize {
        self.config.n_positions
    }
    fn prefixes(&self) -> (&'static str, &'static str) {
        ("search_document: ", "search_query: ")
    }
    fn matryoshka(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Half-split rotation at position p turns (x1, x2) by p × the pair's frequency; interleaved
    /// pairs neighbours. Position 0 is the identity.
    impl Rotary {
        /// Rotates `x` ((batch × heads) × tokens × head size, row-major) in place: the rotation
        /// of [`Rotary::apply_rows`] in the per-head layout, where this test checks it.
        fn apply(&self, x: &mut [f32], t: usize) {
            for (row, v) in x.chunks_exact_mut(2 * self.half).enumerate() {
                self.rotate(v, row % t);
            }
        }
    }

    #[test]
    fn rotary_turns_each_pair_by_its_angle() {
        for interleaved in [false, true] {
            let r = Rotary::new(4, 3, 10_000.0, interleaved);
            let mut x = [1.0f32, 2.0, 3.0, 4.0].repeat(3);
            r.apply(&mut x, 3);
            assert_eq!(&x[..4], &[1.0, 2.0, 3.0, 4.0]);
            // Position 2, first pair (frequency 1): angle 2.
            let (a, b) = if interleaved { (0, 1) } else { (0, 2) };
            let (x1, x2) = ([1.0f32, 2.0, 3.0, 4.0][a], [1.0f32, 2.0, 3.0, 4.0][b]);
            let (c, s) = (2f32.cos(), 2f32.sin());
            assert!((x[8 + a] - (x1 * c - x2 * s)).abs() < 1e-6);
            assert!((x[8 + b] - (x1 * s + x2 * c)).abs() < 1e-6);
            // Rotation keeps each pair's length.
            let n = |v: &[f32]| (v[a] * v[a] + v[b] * v[b]).sqrt();
            assert!((n(&x[8..12]) - (x1 * x1 + x2 * x2).sqrt()).abs() < 1e-5);
        }
    }
}
