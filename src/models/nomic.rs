//! nomic-embed-text v1 / v1.5 through `candle_transformers::models::nomic_bert` (GPUs and half
//! precision; the CPU's f32 and int8 run `nomic_fused.rs`), with its task prefixes and Matryoshka
//! truncation.

use super::Backend;
use crate::error::{because, Error, Result};
use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::nomic_bert::{Config, NomicBertModel};
use std::path::Path;

pub struct Nomic {
    model: NomicBertModel,
    hidden: usize,
    max_positions: usize,
}

impl Nomic {
    pub fn load(
        dir: &Path,
        config: &serde_json::Value,
        weights: &Path,
        device: &candle_core::Device,
        dtype: DType,
    ) -> Result<Nomic> {
        let cfg = read_config(dir, config)?;
        // SAFETY: the file is memory-mapped read-only and not modified while the model lives.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], dtype, device) }
            .map_err(|e| Error::model(weights, e))?;
        let model = NomicBertModel::load(vb, &cfg).map_err(|e| Error::model(weights, e))?;
        Ok(Nomic {
            model,
            hidden: cfg.n_embd,
            max_positions: cfg.n_positions,
        })
    }
}

/// The model's `config.json` as candle's NomicBERT config, SwiGLU only.
pub(super) fn read_config(dir: &Path, config: &serde_json::Value) -> Result<Config> {
    let cfg: Config = serde_json::from_value(config.clone()).map_err(|e| {
        Error::model(
            dir.join("config.json"),
            because("not a nomic_bert config", e),
        )
    })?;
    if cfg.activation_function != "swiglu" {
        return Err(Error::model(
            dir.join("config.json"),
            format!(
                "activation `{}` is not supported (swiglu only)",
                cfg.activation_function
            ),
        ));
    }
    Ok(cfg)
}

impl Backend for Nomic {
    fn hidden(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        self.model.forward(ids, None, Some(mask))
    }
    fn hidden_size(&self) -> usize {
        self.hidden
    }
    fn max_positions(&self) -> usize {
        self.max_positions
    }
    fn prefixes(&self) -> (&'static str, &'static str) {
        ("search_document: ", "search_query: ")
    }
    fn matryoshka(&self) -> bool {
        true
    }
}
