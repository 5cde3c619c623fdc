//! BERT-family encoders with int8 linear layers on the CPU (`[embed] dtype = "int8"`): every
//! linear layer's weights quantized at load (`int8.rs`: per output channel, activations per row
//! at each product); embeddings, layer norms, attention and pooling stay f32. Same weights and
//! same forward as `candle_transformers::models::bert`, so vectors agree with the f32 model's to
//! quantization error (checked in `tests/embed.rs`).

use super::bert::{open_weights, read_config};
use super::int8::Int8Matrix;
use super::Backend;
use crate::error::{Error, Result};
use candle_core::{DType, Module, Tensor};
use candle_nn::{embedding, layer_norm, Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};
use std::path::Path;

/// A linear layer with int8 weights and an f32 bias.
struct QLinear {
    weight: Int8Matrix,
    bias: Tensor,
}

impl QLinear {
    fn load(vb: VarBuilder, inputs: usize, outputs: usize) -> candle_core::Result<QLinear> {
        let w = vb.get((outputs, inputs), "weight")?;
        let bias = vb.get(outputs, "bias")?;
        let w = w.flatten_all()?.to_vec1::<f32>()?;
        Ok(QLinear {
            weight: Int8Matrix::quantize(&w, outputs, inputs),
            bias,
        })
    }

    /// `x` (batch, tokens, inputs) → (batch, tokens, outputs).
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, k) = x.dims3()?;
        let rows = x.flatten_all()?.to_vec1::<f32>()?;
        let y = self.weight.matmul(&rows, b * t);
        debug_assert_eq!(k, self.weight.inputs());
        Tensor::from_vec(y, (b, t, self.weight.outputs()), x.device())?.broadcast_add(&self.bias)
    }
}

struct Layer {
    query: QLinear,
    key: QLinear,
    value: QLinear,
    attention_out: QLinear,
    attention_norm: LayerNorm,
    intermediate: QLinear,
    output: QLinear,
    output_norm: LayerNorm,
}

impl Layer {
    fn load(vb: VarBuilder, c: &Config) -> candle_core::Result<Layer> {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let a = vb.pp("attention");
        let eps = c.layer_norm_eps;
        Ok(Layer {
            query: QLinear::load(a.pp("self").pp("query"), h, h)?,
            key: QLinear::load(a.pp("self").pp("key"), h, h)?,
            value: QLinear::load(a.pp("self").pp("value"), h, h)?,
            attention_out: QLinear::load(a.pp("output").pp("dense"), h, h)?,
            attention_norm: layer_norm(h, eps, a.pp("output").pp("LayerNorm"))?,
            intermediate: QLinear::load(vb.pp("intermediate").pp("dense"), h, i)?,
            output: QLinear::load(vb.pp("output").pp("dense"), i, h)?,
            output_norm: layer_norm(h, eps, vb.pp("output").pp("LayerNorm"))?,
        })
    }

    /// One encoder layer over `x` (batch, tokens, hidden) with the additive mask `bias`
    /// (batch, 1, 1, tokens).
    fn forward(&self, x: &Tensor, bias: &Tensor, c: &Config) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let heads = c.num_attention_heads;
        let d = h / heads;
        let split = |y: Tensor| y.reshape((b, t, heads, d))?.transpose(1, 2)?.contiguous();
        let q = split(self.query.forward(x)?)?;
        let k = split(self.key.forward(x)?)?;
        let v = split(self.value.forward(x)?)?;
        let scores = (q.matmul(&k.t()?)? / (d as f64).sqrt())?.broadcast_add(bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, t, h))?;
        let x = self
            .attention_norm
            .forward(&(self.attention_out.forward(&ctx)? + x)?)?;
        let mid = self.intermediate.forward(&x)?;
        let mid = match c.hidden_act {
            HiddenAct::Gelu => mid.gelu_erf()?,
            HiddenAct::GeluApproximate => mid.gelu()?,
            HiddenAct::Relu => mid.relu()?,
        };
        self.output_norm.forward(&(self.output.forward(&mid)? + x)?)
    }
}

pub struct BertQ8 {
    words: Embedding,
    positions: Embedding,
    types: Embedding,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    config: Config,
}

impl BertQ8 {
    /// Loads the f32 weights of `weights` and quantizes every linear layer's.
    pub fn load(dir: &Path, config: &serde_json::Value, weights: &Path) -> Result<BertQ8> {
        let cfg = read_config(dir, config)?;
        let vb = open_weights(weights, DType::F32, &candle_core::Device::Cpu)?;
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        Self::build(vb, cfg).map_err(|e| Error::model(weights, e))
    }

    fn build(vb: VarBuilder, c: Config) -> candle_core::Result<BertQ8> {
        let e = vb.pp("embeddings");
        let h = c.hidden_size;
        let layers = (0..c.num_hidden_layers)
            .map(|i| Layer::load(vb.pp("encoder").pp(format!("layer.{i}")), &c))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(BertQ8 {
            words: embedding(c.vocab_size, h, e.pp("word_embeddings"))?,
            positions: embedding(c.max_position_embeddings, h, e.pp("position_embeddings"))?,
            types: embedding(c.type_vocab_size, h, e.pp("token_type_embeddings"))?,
            embed_norm: layer_norm(h, c.layer_norm_eps, e.pp("LayerNorm"))?,
            layers,
            config: c,
        })
    }
}

impl Backend for BertQ8 {
    fn hidden(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (_, t) = ids.dims2()?;
        let positions = Tensor::arange(0u32, t as u32, ids.device())?;
        let x = (self.words.forward(ids)? + self.types.forward(&ids.zeros_like()?)?)?
            .broadcast_add(&self.positions.forward(&positions)?)?;
        let mut x = self.embed_norm.forward(&x)?;
        // As candle's BERT: (1 - mask) × f32::MIN added to every score of a padded key.
        let keep = mask.to_dtype(DType::F32)?.unsqueeze(1)?.unsqueeze(1)?;
        let bias = ((keep.ones_like()? - &keep)? * f32::MIN as f64)?;
        for layer in &self.layers {
            x = layer.forward(&x, &bias, &self.config)?;
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
