//! `docs/pipeline-reference.md` is what the sections' declarations generate: a key added,
//! removed, re-documented or given another default changes the reference, or this fails.

#[test]
fn the_checked_in_pipeline_reference_is_the_generated_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/pipeline-reference.md");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = ri_batch::config::reference();
    assert!(
        on_disk == generated,
        "{} is not the generated reference; regenerate it with \
         `cargo run --release --example pipeline_reference > docs/pipeline-reference.md`",
        path.display()
    );
}
