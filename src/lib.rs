//! ri-batch: batch evaluation of repository retrieval. Stages scan → chunk → embed → index →
//! retrieve → pack → extract → evaluate each write Parquet artifacts with manifests, so whole
//! configurations are compared at once and analysed with SQL.

#[macro_use]
mod named;

pub mod answer;
pub mod artifact;
pub mod config;
pub mod error;
pub mod evaluation;
pub mod memory;
pub mod models;
pub mod packing;
pub mod pipeline;
pub mod report;
pub mod repos;
pub mod retrieval;
pub mod rng;
pub mod secrets;
pub mod serve;
pub mod sources;
pub mod sql;
pub mod stages;
pub mod text;

pub use error::{Error, Result};
