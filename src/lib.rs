//! ri-batch: batch evaluation of repository retrieval. Stages scan → chunk → embed → index →
//! retrieve → pack → extract → evaluate each write Parquet artifacts with manifests, so whole
//! configurations are compared at once and analysed with SQL.

#[macro_use]
mod named;

pub mod answer;
pub mod artifact;
pub mod bm25;
pub mod compare;
pub mod config;
pub mod dataset;
pub mod error;
pub mod import;
pub mod intellirag;
pub mod memory;
pub mod metrics;
pub mod models;
pub mod outcomes;
pub mod packers;
pub mod pipeline;
pub mod readers;
pub mod report;
pub mod retrieval;
pub mod rng;
pub mod schema;
pub mod scope;
pub mod selectors;
pub mod serve;
pub mod shard;
pub mod source;
pub mod sql;
pub mod stages;
pub mod summary;
pub mod swebench;
pub mod table;
pub mod text;
pub mod trec;

pub use error::{Error, Result};
