//! Embeds the benchmark texts repeatedly, for profiling (`perf record`).
fn main() {
    let dir = std::path::Path::new("models/all-minilm-l6-v2");
    let m =
        ri_batch::models::Embedder::load(dir, ri_batch::models::Device::Cpu, 512, None).unwrap();
    let texts: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string("target/embed-bench/texts.json").unwrap())
            .unwrap();
    let budget: usize = std::env::args().nth(1).map_or(4096, |b| b.parse().unwrap());
    let t = std::time::Instant::now();
    for _ in 0..2 {
        m.embed(
            &texts,
            ri_batch::models::TextKind::Document,
            budget,
            |_, _| {},
        )
        .unwrap();
    }
    eprintln!("batch_tokens {budget}: {:.2}s", t.elapsed().as_secs_f64());
}
