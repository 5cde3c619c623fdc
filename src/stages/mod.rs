//! The pipeline's stages, one module each; thin adapters between artifacts and the algorithms.

pub mod chunk;
pub mod embed;
pub mod evaluate;
pub mod extract;
pub mod index;
pub mod pack;
pub mod questions;
pub mod retrieve;
pub mod scan;
