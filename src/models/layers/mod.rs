//! Layers and kernels shared by the models' CPU forward passes: the linear layer in f32 or int8
//! ([`linear`], [`int8`]), attention over fused query/key/value rows ([`attention`]), gemm and
//! per-sequence attention kernels ([`kernels`]) and the fused element-wise passes ([`fast`]).

mod attention;
pub(super) mod fast;
pub mod int8;
mod kernels;
mod linear;

pub(super) use attention::{context, Mask};
pub(super) use linear::Linear;
