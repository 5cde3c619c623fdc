//! BERT-family encoders (MiniLM, BGE, E5 ...) through `candle_transformers::models::bert`.

use super::Backend;
use crate::error::{Error, Result};
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
    ) -> Result<Bert> {
        let cfg: Config = serde_json::from_value(config.clone()).map_err(|e| {
            Error::model(dir.join("config.json"), format!("not a BERT config: {e}"))
        })?;
        // SAFETY: the file is memory-mapped read-only and not modified while the model lives.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, device) }
            .map_err(|e| Error::model(weights, e))?;
        let model = BertModel::load(vb, &cfg).map_err(|e| Error::model(weights, e))?;
        Ok(Bert {
            model,
            hidden: cfg.hidden_size,
            max_positions: cfg.max_position_embeddings,
        })
    }
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
