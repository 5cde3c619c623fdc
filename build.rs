//! Build script: tells tests whether the shared evaluation data (`../shared/data`, present in
//! the development checkout, absent from a user's clone and from CI) is here, so tests that need
//! it are ignored with their reason instead of passing without running.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_data)");
    println!("cargo::rerun-if-changed=build.rs");
    if std::path::Path::new("../shared/data/cosqa-dev").is_dir() {
        println!("cargo::rustc-cfg=shared_data");
    }
}
