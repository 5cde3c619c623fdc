//! The linear layer the CPU encoders share: f32 weights transposed once for gemm, or int8 weights
//! quantized at load ([`super::int8`]), with an f32 bias and, optionally, the erf GELU added in
//! place after the product ([`super::fast`]).

use super::fast;
use super::int8::Int8Matrix;
use super::kernels;
use candle_core::{CpuStorage, Tensor};
use candle_nn::VarBuilder;

/// A linear layer's weights: int8 (quantized at load), or f32 transposed once to inputs ×
/// outputs (row-major) for gemm.
enum Weights {
    Int8(Int8Matrix),
    F32(Vec<f32>),
}

/// A linear layer with an f32 bias (several layers' weights side by side when they read the
/// same input: query, key and value are one product).
pub(in crate::models) struct Linear {
    weight: Weights,
    inputs: usize,
    /// One per output (zeros for a layer without one).
    bias: Vec<f32>,
    /// Whether the layer has a bias: without one, a product without GELU skips the bias pass.
    biased: bool,
}

impl Linear {
    pub(in crate::models) fn load(
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
    pub(in crate::models) fn load_side_by_side(
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
    pub(in crate::models) fn product(
        &self,
        x: &Tensor,
        gelu: bool,
    ) -> candle_core::Result<Vec<f32>> {
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
    pub(in crate::models) fn forward(&self, x: &Tensor, gelu: bool) -> candle_core::Result<Tensor> {
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
