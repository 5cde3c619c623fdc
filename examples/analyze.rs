//! Prints the terms of stdin under the analyser options given as arguments (for debugging).
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let whole = args.iter().any(|a| a == "--whole");
    let digits = args.iter().any(|a| a == "--digits");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).unwrap();
    let a = ri_batch::text::analyze::Analyzer::new(false, false)
        .whole_identifiers(whole)
        .split_digits(digits);
    println!("{:?}", a.terms(&text));
}
