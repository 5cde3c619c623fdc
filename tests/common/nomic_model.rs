//! A NomicBERT model of any shape with weights the caller draws, under candle's `nomic_bert`
//! tensor names: its `config.json` and its tensors, for `tests/embed.rs` and `benches/nomic.rs`.

use candle_core::Tensor;
use std::collections::HashMap;

/// The model's shape.
pub struct Shape {
    pub vocab: usize,
    pub width: usize,
    pub heads: usize,
    pub layers: usize,
    pub inner: usize,
    pub positions: usize,
}

/// nomic-embed-text's configuration at `s`: post-norm, no biases, half-split rotary.
pub fn config(s: &Shape) -> serde_json::Value {
    serde_json::json!({
        "model_type": "nomic_bert", "architectures": ["NomicBertModel"], "vocab_size": s.vocab,
        "n_embd": s.width, "n_head": s.heads, "n_layer": s.layers, "n_inner": s.inner,
        "n_positions": s.positions, "type_vocab_size": 2, "layer_norm_epsilon": 1e-12,
        "rotary_emb_fraction": 1.0, "rotary_emb_base": 1000.0, "rotary_emb_interleaved": false,
        "qkv_proj_bias": false, "mlp_fc1_bias": false, "mlp_fc2_bias": false,
        "activation_function": "swiglu", "prenorm": false
    })
}

/// Every tensor of a model at `s`, each drawn by `rand(shape, scale, offset)` in a fixed order;
/// word embeddings at `word_scale` (token types at a tenth of it), with `biases` on every linear
/// layer.
pub fn tensors(
    s: &Shape,
    word_scale: f32,
    biases: bool,
    rand: &mut dyn FnMut(&[usize], f32, f32) -> Tensor,
) -> HashMap<String, Tensor> {
    let (e, inner) = (s.width, s.inner);
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert(
        "embeddings.word_embeddings.weight".into(),
        rand(&[s.vocab, e], word_scale, 0.0),
    );
    t.insert(
        "embeddings.token_type_embeddings.weight".into(),
        rand(&[2, e], word_scale / 10.0, 0.0),
    );
    t.insert("emb_ln.weight".into(), rand(&[e], 0.1, 1.0));
    t.insert("emb_ln.bias".into(), rand(&[e], 0.1, 0.0));
    let w = 1.0 / (e as f32).sqrt();
    for i in 0..s.layers {
        let p = format!("encoder.layers.{i}.");
        t.insert(format!("{p}attn.Wqkv.weight"), rand(&[3 * e, e], w, 0.0));
        t.insert(format!("{p}attn.out_proj.weight"), rand(&[e, e], w, 0.0));
        t.insert(format!("{p}mlp.fc11.weight"), rand(&[inner, e], w, 0.0));
        t.insert(format!("{p}mlp.fc12.weight"), rand(&[inner, e], w, 0.0));
        t.insert(
            format!("{p}mlp.fc2.weight"),
            rand(&[e, inner], 1.0 / (inner as f32).sqrt(), 0.0),
        );
        if biases {
            t.insert(format!("{p}attn.Wqkv.bias"), rand(&[3 * e], 0.1, 0.0));
            for (n, k) in [
                ("attn.out_proj", e),
                ("mlp.fc11", inner),
                ("mlp.fc12", inner),
                ("mlp.fc2", e),
            ] {
                t.insert(format!("{p}{n}.bias"), rand(&[k], 0.1, 0.0));
            }
        }
        for n in ["norm1", "norm2"] {
            t.insert(format!("{p}{n}.weight"), rand(&[e], 0.1, 1.0));
            t.insert(format!("{p}{n}.bias"), rand(&[e], 0.1, 0.0));
        }
    }
    t
}
