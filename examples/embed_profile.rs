//! Embeds the benchmark texts repeatedly, for profiling (`perf record`): f32, or int8 with
//! `int8` as the second argument.
//!
//!     cargo run --release --example embed_profile -- [BATCH_TOKENS] [f32|int8]
fn main() {
    // The binary's thread layout: one single-threaded worker per core (see models/threads.rs).
    ri_batch::models::threads::configure();
    let dir = std::path::Path::new("models/all-minilm-l6-v2");
    let args: Vec<String> = std::env::args().collect();
    let budget: usize = args.get(1).map_or(512, |b| b.parse().unwrap());
    let precision = match args.get(2).map(String::as_str) {
        Some("int8") => Some(ri_batch::models::Precision::Int8),
        _ => None,
    };
    let m = ri_batch::models::Embedder::load_with(
        dir,
        ri_batch::models::Device::Cpu,
        512,
        None,
        precision,
    )
    .unwrap();
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let texts: Vec<String> = serde_json::from_str(
        &std::fs::read_to_string(format!("{target}/embed-bench/texts.json")).unwrap(),
    )
    .unwrap();
    let t = std::time::Instant::now();
    for _ in 0..4 {
        m.embed(
            &texts,
            ri_batch::models::TextKind::Document,
            budget,
            |_, _| {},
        )
        .unwrap();
    }
    eprintln!(
        "batch_tokens {budget}, {:?}: {:.2}s",
        precision,
        t.elapsed().as_secs_f64()
    );
}
