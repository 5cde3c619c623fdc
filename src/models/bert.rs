//! BERT-family encoders (MiniLM, BGE, E5 ...) through `candle_transformers::models::bert`.

use super::Backend;
use crate::error::{because, Error, Result};
use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::path::Path;

pub struct Bert {
    model: BertModel,
    hidden: usize,
    max_positions: usize,
}

impl Bert {
    pub fn load(
        dir: &Path,
        config: &serde_json::Value,
        weights: &Path,
        device: &candle_core::Device,
        dtype: DType,
    ) -> Result<Bert> {
        let cfg = read_config(dir, config)?;
        if dtype != DType::F32 {
            // candle's BERT builds its attention mask as (1 - mask) × f32::MIN in the model's
            // dtype: f32::MIN is -inf in f16 and in bf16, and 0 × -inf is NaN, so every vector
            // would be NaN, with or without padding.
            return Err(Error::model(
                dir,
                format!(
                    "dtype {} is not supported for BERT-family models: candle's BERT attention mask overflows half precision (every vector would be NaN); use f32",
                    if dtype == DType::F16 { "f16" } else { "bf16" }
                ),
            ));
        }
        let vb = open_weights(weights, dtype, device)?;
        let model = BertModel::load(vb, &cfg).map_err(|e| Error::model(weights, e))?;
        Ok(Bert {
            model,
            hidden: cfg.hidden_size,
            max_positions: cfg.max_position_embeddings,
        })
    }
}

/// A BERT-family `config.json`, as candle's BERT reads it.
pub(super) fn read_config(dir: &Path, config: &serde_json::Value) -> Result<Config> {
    serde_json::from_value(config.clone())
        .map_err(|e| Error::model(dir.join("config.json"), because("not a BERT config", e)))
}

/// The model's safetensors, memory-mapped.
pub(super) fn open_weights(
    weights: &Path,
    dtype: DType,
    device: &candle_core::Device,
) -> Result<VarBuilder<'static>> {
    // SAFETY: the file is memory-mapped read-only and not modified while the model lives.
    unsafe { VarBuilder::from_mmaped_safetensors(&[weights], dtype, device) }
        .map_err(|e| Error::model(weights, e))
}

impl Backend for Bert {
    fn hidden(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let types = ids.zeros_like()?;
        self.model.forward(ids, &types, Some(mask))
    }
    fn hidden_size(&self) -> usize {
        self.hidden
    }
    fn max_positions(&self) -> usize {
        self.max_positions
    }
}
