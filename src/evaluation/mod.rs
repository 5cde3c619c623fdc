//! What a run is scored against and how: question sets with their evidence anchors
//! ([`dataset`]) and the metrics and statistics computed over them ([`metrics`]). The reports
//! that present the scores are [`crate::report`].

pub mod dataset;
pub mod metrics;
