//! BERT-family encoders on the CPU with ri-batch's own forward pass, for f32 and for int8 linear
//! layers (`[embed] dtype = "int8"`: weights quantized at load, `int8.rs`: per output channel,
//! activations per row at each product). Query, key and value are one product; the bias and the
//! erf GELU are added in place after each product and the attention softmax is one pass
//! (`fast.rs`), where candle's BERT spends a quarter of its time in libm's `erff` and `expf` and
//! in separate element-wise passes. Embeddings, layer norms and the attention products stay in
//! candle. Same weights and same forward as `candle_transformers::models::bert`: f32 vectors agree
//! with sentence-transformers' to about 3e-7 per element, int8 ones with f32 to quantization error (`tests/embed.rs`).

use super::bert::{open_weights, read_config};
use super::layers::{context, Linear, Mask};
use super::Backend;
use crate::error::{Error, Result};
use candle_core::{DType, Module, Tensor};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};
use std::path::Path;

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
