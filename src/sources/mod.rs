//! Inputs from elsewhere made into ri-batch's own: standard retrieval datasets (BEIR, CoSQA) as a
//! corpus and questions ([`import`]), and SWE-bench instances as questions asked at their base
//! commits ([`swebench`]). Reading the repositories themselves is [`crate::repos`].

pub mod import;
pub mod swebench;
