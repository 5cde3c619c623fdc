//! The Qwen2 reader model on GGUF weights: candle-transformers 0.11's `quantized_qwen2` (MIT or
//! Apache-2.0), kept here with one change: the model is `Clone`, and a clone shares the
//! weights' tensors (candle keeps them behind `Arc`s) while owning its own key/value cache. So
//! every reader worker reads with one copy of the weights in memory, not one copy per core.
//! The arithmetic is candle's, operation for operation (tracing spans left out).

use candle_core::quantized::{gguf_file, QMatMul};
use candle_core::{DType, Device, IndexOp, Module, Result, Tensor};
use candle_nn::Embedding;
use candle_transformers::quantized_nn::RmsNorm;
use candle_transformers::utils::{build_causal_mask, repeat_kv};
use std::collections::HashMap;

#[derive(Debug, Clone)]
struct Mlp {
    gate: QMatMul,
    down: QMatMul,
    up: QMatMul,
}

impl Module for Mlp {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let w1 = self.gate.forward(xs)?;
        let w3 = self.up.forward(xs)?;
        self.down.forward(&(candle_nn::ops::silu(&w1)? * w3)?)
    }
}

#[derive(Debug, Clone)]
struct Layer {
    wq: QMatMul,
    wk: QMatMul,
    wv: QMatMul,
    bq: Tensor,
    bk: Tensor,
    bv: Tensor,
    wo: QMatMul,
    attention_norm: RmsNorm,
    mlp: Mlp,
    ffn_norm: RmsNorm,
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
    cos: Tensor,
    sin: Tensor,
    neg_inf: Tensor,
    kv_cache: Option<(Tensor, Tensor)>,
}

impl Layer {
    fn rotary(&self, x: &Tensor, index_pos: usize) -> Result<Tensor> {
        let (_b, _h, seq_len, _d) = x.dims4()?;
        let cos = self.cos.narrow(0, index_pos, seq_len)?;
        let sin = self.sin.narrow(0, index_pos, seq_len)?;
        candle_nn::rotary_emb::rope(&x.contiguous()?, &cos, &sin)
    }

    fn heads(&self, x: Tensor, b: usize, seq_len: usize, n: usize) -> Result<Tensor> {
        x.reshape((b, seq_len, n, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()
    }

    fn attention(&mut self, x: &Tensor, mask: Option<&Tensor>, index_pos: usize) -> Result<Tensor> {
        let (b, seq_len, n_embd) = x.dims3()?;
        let q = self.wq.forward(x)?.broadcast_add(&self.bq)?;
        let k = self.wk.forward(x)?.broadcast_add(&self.bk)?;
        let v = self.wv.forward(x)?.broadcast_add(&self.bv)?;
        let q = self.heads(q, b, seq_len, self.n_head)?;
        let k = self.heads(k, b, seq_len, self.n_kv_head)?;
        let v = self.heads(v, b, seq_len, self.n_kv_head)?;
        let q = self.rotary(&q, index_pos)?;
        let k = self.rotary(&k, index_pos)?;
        let (k, v) = match &self.kv_cache {
            Some((kc, vc)) if index_pos != 0 => {
                (Tensor::cat(&[kc, &k], 2)?, Tensor::cat(&[vc, &v], 2)?)
            }
            _ => (k, v),
        };
        self.kv_cache = Some((k.clone(), v.clone()));
        let k = repeat_kv(k, self.n_head / self.n_kv_head)?;
        let v = repeat_kv(v, self.n_head / self.n_kv_head)?;
        let att = (q.matmul(&k.t()?)? / (self.head_dim as f64).sqrt())?;
        let att = match mask {
            None => att,
            Some(mask) => {
                let mask = mask.broadcast_as(att.shape())?;
                mask.where_cond(&self.neg_inf.broadcast_as(mask.shape().dims())?, &att)?
            }
        };
        let att = candle_nn::ops::softmax_last_dim(&att)?;
        let y = att.matmul(&v.contiguous()?)?;
        let y = y.transpose(1, 2)?.reshape(&[b, seq_len, n_embd])?;
        self.wo.forward(&y)
    }
}

/// A Qwen2 model: its weights (shared by clones) and one key/value cache (a clone's own).
#[derive(Debug, Clone)]
pub struct Qwen2 {
    embeddings: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
    masks: HashMap<(usize, usize), Tensor>,
}

/// The rotary tables: cos and sin of position × frequency, `context` rows of `head_dim / 2`.
fn rotary_tables(
    head_dim: usize,
    base: f32,
    context: usize,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let theta: Vec<_> = (0..head_dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / head_dim as f32))
        .collect();
    let theta = Tensor::new(theta.as_slice(), device)?;
    let idx_theta = Tensor::arange(0, context as u32, device)?
        .to_dtype(DType::F32)?
        .reshape((context, 1))?
        .matmul(&theta.reshape((1, theta.elem_count()))?)?;
    Ok((idx_theta.cos()?, idx_theta.sin()?))
}

impl Qwen2 {
    /// The model of `ct`, its tensors read from `reader` onto `device`.
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        ct: gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Qwen2> {
        let md = |s: &str| match ct.metadata.get(s) {
            None => candle_core::bail!("cannot find {s} in metadata"),
            Some(v) => Ok(v),
        };
        let n_head = md("qwen2.attention.head_count")?.to_u32()? as usize;
        let n_kv_head = md("qwen2.attention.head_count_kv")?.to_u32()? as usize;
        let width = md("qwen2.embedding_length")?.to_u32()? as usize;
        let context = md("qwen2.context_length")?.to_u32()? as usize;
        let blocks = md("qwen2.block_count")?.to_u32()? as usize;
        let eps = md("qwen2.attention.layer_norm_rms_epsilon")?.to_f32()? as f64;
        let base = md("qwen2.rope.freq_base")
            .and_then(|m| m.to_f32())
            .unwrap_or(10000f32);
        let head_dim = width / n_head;
        let neg_inf = Tensor::new(f32::NEG_INFINITY, device)?;
        let mut t = |name: &str| ct.tensor(reader, name, device);
        let embeddings = t("token_embd.weight")?.dequantize(device)?;
        let norm = RmsNorm::from_qtensor(t("output_norm.weight")?, eps)?;
        let output = match t("output.weight") {
            Ok(v) => QMatMul::from_qtensor(v)?,
            // Tied word embeddings.
            Err(_) => QMatMul::from_qtensor(t("token_embd.weight")?)?,
        };
        let (cos, sin) = rotary_tables(head_dim, base, context, device)?;
        let mut layers = Vec::with_capacity(blocks);
        for i in 0..blocks {
            let mut w = |part: &str| t(&format!("blk.{i}.{part}"));
            let mlp = Mlp {
                gate: QMatMul::from_qtensor(w("ffn_gate.weight")?)?,
                down: QMatMul::from_qtensor(w("ffn_down.weight")?)?,
                up: QMatMul::from_qtensor(w("ffn_up.weight")?)?,
            };
            layers.push(Layer {
                wq: QMatMul::from_qtensor(w("attn_q.weight")?)?,
                wk: QMatMul::from_qtensor(w("attn_k.weight")?)?,
                wv: QMatMul::from_qtensor(w("attn_v.weight")?)?,
                bq: w("attn_q.bias")?.dequantize(device)?,
                bk: w("attn_k.bias")?.dequantize(device)?,
                bv: w("attn_v.bias")?.dequantize(device)?,
                wo: QMatMul::from_qtensor(w("attn_output.weight")?)?,
                attention_norm: RmsNorm::from_qtensor(w("attn_norm.weight")?, eps)?,
                mlp,
                ffn_norm: RmsNorm::from_qtensor(w("ffn_norm.weight")?, eps)?,
                n_head,
                n_kv_head,
                head_dim,
                cos: cos.clone(),
                sin: sin.clone(),
                neg_inf: neg_inf.clone(),
                kv_cache: None,
            });
        }
        Ok(Qwen2 {
            embeddings: Embedding::new(embeddings, width),
            layers,
            norm,
            output,
            masks: HashMap::new(),
        })
    }

    fn mask(&mut self, seq_len: usize, index_pos: usize, device: &Device) -> Result<Tensor> {
        let key = (seq_len, index_pos + seq_len);
        if let Some(mask) = self.masks.get(&key) {
            return Ok(mask.clone());
        }
        let mask = build_causal_mask(seq_len, index_pos, device)?;
        self.masks.insert(key, mask.clone());
        Ok(mask)
    }

    /// Forgets the key/value cache (between prompts).
    pub fn clear_kv_cache(&mut self) {
        for layer in self.layers.iter_mut() {
            layer.kv_cache = None;
        }
    }

    /// The logits after the last of `x`'s tokens (`1 × seq_len` ids at positions from
    /// `index_pos`), the cache extended by them.
    pub fn forward(&mut self, x: &Tensor, index_pos: usize) -> Result<Tensor> {
        let (_b, seq_len) = x.dims2()?;
        let mask = if seq_len == 1 {
            None
        } else {
            Some(self.mask(seq_len, index_pos, x.device())?)
        };
        let mut h = self.embeddings.forward(x)?;
        for layer in self.layers.iter_mut() {
            let attn =
                layer.attention(&layer.attention_norm.forward(&h)?, mask.as_ref(), index_pos)?;
            let x = (attn + &h)?;
            let y = layer.mlp.forward(&layer.ffn_norm.forward(&x)?)?;
            h = (y + &x)?;
        }
        let x = self.norm.forward(&h)?;
        self.output.forward(&x.i((.., seq_len - 1, ..))?)
    }
}
