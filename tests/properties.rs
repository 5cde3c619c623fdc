//! Property tests with arbitrary Unicode and bytes: the chunkers, the unit splitter, the lexical
//! analyser and the config and question parsers never panic; every chunk's line range (line or
//! syntax chunks) rebuilds its text exactly and no line with content is lost; every unit is a
//! piece of its chunk within the chunk's lines.

use proptest::prelude::*;
use ri_batch::text::analyze::Analyzer;
use ri_batch::text::chunker::{chunk_text, split_lines};
use ri_batch::text::units::split_units;

/// Lines that exercise the chunker's rules: headings, fences, lists, tables, code, blank lines,
/// CRLF endings, long lines and arbitrary Unicode.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,40}",
        "#{1,6} \\PC{0,20}",
        Just("```".to_string()),
        Just(String::new()),
        "- \\PC{0,30}",
        "\\| \\PC{0,10} \\| \\PC{0,10} \\|",
        "(fn|def|class|pub fn) [a-z_]{1,12}\\(\\) \\{",
        "\\PC{0,30}\r",
        "[a-z ]{200,400}",
        "\\s{0,4}\\}",
        // Brackets, quotes and comment openers the statement splitter tracks, among any text.
        "\\PC{0,10}[(\\[\"'`#]\\PC{0,10}",
        Just("    \"\"\"doc ⁻² (".to_string()),
        Just("/* ⁻²".to_string()),
    ]
}

fn document() -> impl Strategy<Value = String> {
    (prop::collection::vec(line(), 0..60), any::<bool>()).prop_map(|(lines, newline)| {
        let mut t = lines.join("\n");
        if newline {
            t.push('\n');
        }
        t
    })
}

/// Every piece is exactly its lines of `text`, and every line with content is in some piece.
fn rebuild_and_cover(
    text: &str,
    pieces: &[ri_batch::text::chunker::Piece],
) -> Result<(), TestCaseError> {
    let lines = split_lines(text);
    for p in pieces {
        prop_assert!(p.start_line >= 1 && p.start_line <= p.end_line);
        prop_assert!(p.end_line as usize <= lines.len());
        let rebuilt = lines[p.start_line as usize - 1..p.end_line as usize].join("\n");
        prop_assert_eq!(&p.text, &rebuilt);
    }
    for (i, l) in lines.iter().enumerate() {
        if !l.trim().is_empty() {
            let n = i as u32 + 1;
            prop_assert!(
                pieces.iter().any(|p| p.start_line <= n && n <= p.end_line),
                "line {} not chunked",
                n
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn chunks_rebuild_their_lines(
        text in document(),
        language in prop::sample::select(vec!["markdown", "rust", "python", "text"]),
        max_tokens in 16usize..400,
        overlap in 0usize..3,
    ) {
        let pieces = chunk_text(&text, language, max_tokens, overlap);
        rebuild_and_cover(&text, &pieces)?;
    }

    #[test]
    fn syntax_chunks_rebuild_their_lines_and_lose_none(
        text in document(),
        language in prop::sample::select(vec!["rust", "python", "javascript", "c", "markdown"]),
        max_tokens in 16usize..400,
    ) {
        let (pieces, _) = ri_batch::text::syntax::chunk_syntax(&text, language, "f", max_tokens, 0);
        rebuild_and_cover(&text, &pieces)?;
    }

    #[test]
    fn units_are_pieces_of_their_chunk(
        text in document(),
        first_line in 1u32..1000,
        kind in prop::sample::select(vec!["markdown", "code", "text", "syntax"]),
        heading in "\\PC{0,20}",
    ) {
        let last = first_line + split_lines(&text).len().max(1) as u32 - 1;
        for u in split_units(&text, first_line, kind, &heading) {
            prop_assert!(text.contains(&u.text), "unit {:?} not in the chunk", u.text);
            prop_assert!(first_line <= u.start_line && u.start_line <= u.end_line);
            prop_assert!(u.end_line <= last);
        }
    }

    #[test]
    fn the_analyser_takes_any_text(text in "\\PC{0,200}", stem: bool, stop: bool, whole: bool, digits: bool) {
        let an = Analyzer::new(stem, stop).whole_identifiers(whole).split_digits(digits);
        for t in an.terms(&text) {
            prop_assert!(!t.is_empty());
        }
    }

    #[test]
    fn the_config_parser_never_panics(text in "\\PC{0,300}") {
        let dir = std::env::temp_dir();
        let _ = ri_batch::config::Plan::parse(&dir.join("p.toml"), &text);
    }

    #[test]
    fn config_values_of_any_type_are_errors_or_plans(
        key in prop::sample::select(vec![
            "chunk.max_tokens", "index.k1", "index.b", "retrieve.top_k", "retrieve.rrf_k",
            "pack.lean", "extract.max_ids", "extract.lexical_threshold", "evaluate.bootstrap",
            "scan.max_file_bytes",
        ]),
        value in prop_oneof![
            any::<i64>().prop_map(|v| v.to_string()),
            any::<f64>().prop_map(|v| format!("{v:?}")),
            "\"\\PC{0,10}\"",
            Just("nan".to_string()),
            Just("-inf".to_string()),
            Just("[]".to_string()),
        ],
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("r")).unwrap();
        let (section, name) = key.split_once('.').unwrap();
        let text = format!(
            "[pipeline]\nname = \"p\"\n[[repos]]\nname = \"a\"\ndir = \"r\"\n[{section}]\n{name} = {value}\n"
        );
        match ri_batch::config::Plan::parse(&dir.path().join("p.toml"), &text) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().contains("p.toml:"), "{}", e),
        }
    }

    #[test]
    fn the_question_parser_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.jsonl");
        std::fs::write(&p, &bytes).unwrap();
        let _ = ri_batch::evaluation::dataset::load_questions(&p);
    }

    #[test]
    fn question_lines_with_any_field_values(
        id in "\\PC{0,8}",
        repo in "\\PC{0,8}",
        split in prop::sample::select(vec!["dev", "holdout", "test", ""]),
        answerable: bool,
        path in "\\PC{0,12}",
        quote in "\\PC{0,12}",
    ) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.jsonl");
        let line = serde_json::json!({
            "id": id, "repo": repo, "split": split, "answerable": answerable,
            "question": "q?", "evidence": [{ "path": path, "quote": quote }],
        });
        std::fs::write(&p, format!("{line}\n")).unwrap();
        if let Err(e) = ri_batch::evaluation::dataset::load_questions(&p) {
            prop_assert!(e.to_string().contains("q.jsonl"), "{}", e);
        }
    }
}
