//! Prints the pipeline reference generated from the sections' declarations
//! (`cargo run --release --example pipeline_reference > docs/pipeline-reference.md`).

fn main() {
    print!("{}", ri_batch::config::reference());
}
