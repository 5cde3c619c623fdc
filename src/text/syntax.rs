//! Syntax-aware chunking (`[chunk] method = "syntax"`): a file is parsed with its tree-sitter
//! grammar and cut along its syntax tree, the way cAST does: adjacent sibling nodes are merged
//! while they fit `max_tokens`, a node too large is split into its children, recursively, and a
//! node with no children left to split falls back to whole lines. Chunks stay line-addressed
//! (a chunk's text is exactly lines `start_line..=end_line`), and each carries the path of the
//! definitions that enclose it (`Outer > method`) as its heading. A language without a grammar
//! here, or a file that does not parse cleanly, is chunked by lines: no file is lost.

use crate::text::chunker::{chunk_text, piece, span_cost, split_lines, Piece};
use crate::text::tokens::approx_tokens;
use std::cell::RefCell;
use std::collections::hash_map::{Entry, HashMap};
use std::ops::Range;
use tree_sitter::{Language, Node, Parser};

/// The `kind` of a chunk cut by syntax (its compaction units are statements, not lines).
pub const SYNTAX_KIND: &str = "syntax";

/// Files larger than this are chunked by lines (a parse is linear, but its tree is not small).
pub const MAX_PARSE_BYTES: usize = 1 << 20;

/// How a file was chunked by the syntax chunker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SyntaxOutcome {
    /// Cut along its syntax tree.
    Parsed,
    /// Its language has no grammar here (Markdown and prose included): line chunks.
    Unsupported,
    /// The parse had errors: line chunks.
    ParseError,
    /// Over [`MAX_PARSE_BYTES`]: line chunks.
    TooLarge,
}

impl SyntaxOutcome {
    /// The name the chunk stage's stats use.
    pub fn name(self) -> &'static str {
        match self {
            SyntaxOutcome::Parsed => "parsed",
            SyntaxOutcome::Unsupported => "unsupported_language",
            SyntaxOutcome::ParseError => "parse_error",
            SyntaxOutcome::TooLarge => "too_large",
        }
    }
}

/// The grammar of a file, by its language name (see `text::lang`) and path (TSX is its own).
fn grammar(language: &str, path: &str) -> Option<(&'static str, Language)> {
    Some(match language {
        "python" => ("python", tree_sitter_python::LANGUAGE.into()),
        "rust" => ("rust", tree_sitter_rust::LANGUAGE.into()),
        "javascript" => ("javascript", tree_sitter_javascript::LANGUAGE.into()),
        "typescript" if path.ends_with(".tsx") => {
            ("tsx", tree_sitter_typescript::LANGUAGE_TSX.into())
        }
        "typescript" => (
            "typescript",
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        ),
        "go" => ("go", tree_sitter_go::LANGUAGE.into()),
        "java" => ("java", tree_sitter_java::LANGUAGE.into()),
        "c" => ("c", tree_sitter_c::LANGUAGE.into()),
        "cpp" => ("cpp", tree_sitter_cpp::LANGUAGE.into()),
        _ => return None,
    })
}

/// Whether a language is cut by syntax (has a grammar here).
pub fn supported(language: &str) -> bool {
    grammar(language, "").is_some()
}

thread_local! {
    /// One parser per grammar per thread, reused across files.
    static PARSERS: RefCell<HashMap<&'static str, Parser>> = RefCell::new(HashMap::new());
}

/// Node kinds that open a scope: definitions whose name goes into the heading of what they hold.
const SCOPES: &[&str] = &[
    // Python
    "class_definition",
    "function_definition",
    "decorated_definition",
    // Rust
    "function_item",
    "impl_item",
    "trait_item",
    "mod_item",
    "struct_item",
    "enum_item",
    "union_item",
    "macro_definition",
    // JavaScript / TypeScript
    "class_declaration",
    "abstract_class_declaration",
    "function_declaration",
    "generator_function_declaration",
    "method_definition",
    "interface_declaration",
    "enum_declaration",
    "internal_module",
    // Go
    "method_declaration",
    "type_declaration",
    // Java
    "record_declaration",
    "constructor_declaration",
    "annotation_type_declaration",
    // C / C++
    "struct_specifier",
    "union_specifier",
    "enum_specifier",
    "class_specifier",
    "namespace_definition",
    "template_declaration",
];

/// Kinds that name a definition when reached through `declarator` fields (C and C++).
const NAMES: &[&str] = &[
    "identifier",
    "field_identifier",
    "type_identifier",
    "qualified_identifier",
    "destructor_name",
    "operator_name",
];

/// The definition a node is, or wraps (`export class A`).
fn definition(n: Node) -> Option<Node> {
    if SCOPES.contains(&n.kind()) {
        return Some(n);
    }
    match n.kind() {
        "export_statement" => n.child_by_field_name("declaration"),
        _ => None,
    }
}

/// The name of a scope node, if it has one.
fn name_of(node: Node, src: &[u8]) -> Option<String> {
    let text = |n: Node| n.utf8_text(src).ok().map(|s| s.to_string());
    if let Some(n) = node.child_by_field_name("name") {
        return text(n);
    }
    match node.kind() {
        "impl_item" => node.child_by_field_name("type").and_then(text),
        "decorated_definition" => node
            .child_by_field_name("definition")
            .and_then(|d| name_of(d, src)),
        "template_declaration" | "type_declaration" => {
            let mut c = node.walk();
            let found = node
                .named_children(&mut c)
                .filter(|n| n.kind() != "template_parameter_list")
                .find_map(|n| name_of(n, src));
            found
        }
        _ => {
            // C's `function_definition`: declarator → function_declarator → identifier.
            let mut n = node.child_by_field_name("declarator")?;
            for _ in 0..8 {
                if NAMES.contains(&n.kind()) {
                    return text(n);
                }
                n = n.child_by_field_name("declarator")?;
            }
            None
        }
    }
}

/// A run of whole lines at one level of the tree: the child node it holds when it holds one,
/// and the node to split it by when it is too large (its last node that spans lines and has
/// children: the body of `impl A {`, whose other children share the first line).
struct Seg<'t> {
    lines: Range<usize>,
    single: Option<Node<'t>>,
    node: Option<Node<'t>>,
    /// Whether it holds a named node (not only punctuation such as a closing `}`).
    named: bool,
}

struct Cut<'a> {
    tokens: &'a [usize],
    src: &'a [u8],
    max: usize,
}

impl<'a> Cut<'a> {
    /// The size of lines `r` as the line chunker counts it.
    fn cost(&self, r: &Range<usize>) -> usize {
        span_cost(self.tokens, r)
    }

    /// `node`'s children as runs of lines covering `range`: a new run starts at each line where
    /// a child starts (lines before the first child go with it; a child that starts on the line
    /// another ends shares its run).
    fn segments<'t>(&self, node: Node<'t>, range: &Range<usize>) -> Vec<Seg<'t>> {
        let mut segs: Vec<(Range<usize>, Vec<Node<'t>>)> = Vec::new();
        let mut c = node.walk();
        for child in node.children(&mut c) {
            let row = child.start_position().row;
            match segs.last_mut() {
                Some((r, nodes)) if row <= r.start || row >= range.end => nodes.push(child),
                None if row <= range.start || row >= range.end => {
                    segs.push((range.start..range.start, vec![child]))
                }
                _ => segs.push((row..row, vec![child])),
            }
        }
        if segs.is_empty() {
            return vec![Seg {
                lines: range.clone(),
                single: None,
                node: None,
                named: true,
            }];
        }
        segs[0].0.start = range.start;
        let starts: Vec<usize> = segs.iter().map(|(r, _)| r.start).collect();
        segs.into_iter()
            .enumerate()
            .map(|(i, (r, nodes))| {
                let end = starts.get(i + 1).copied().unwrap_or(range.end);
                let node =
                    nodes.iter().rev().copied().find(|n| {
                        n.child_count() > 0 && n.end_position().row > n.start_position().row
                    });
                Seg {
                    lines: r.start..end,
                    single: (nodes.len() == 1).then(|| nodes[0]),
                    node,
                    named: nodes.iter().any(|n| n.is_named()),
                }
            })
            .collect()
    }

    /// Cuts `range` (the lines of `node`) into chunks under `scope`, in file order: runs of
    /// sibling nodes merged while they fit, a run too large split by its node, recursively. A
    /// node's header (`def f(x):`, `impl A {`, the lines before its body) joins the first chunk
    /// of its body and a closing run (`}`) the last, when they fit.
    fn split(&self, node: Node, range: Range<usize>, scope: &str) -> Vec<(Range<usize>, String)> {
        let segs = self.segments(node, &range);
        let last = segs.len().saturating_sub(1);
        let mut out: Vec<(Range<usize>, String)> = Vec::new();
        let mut group: Option<(Range<usize>, Option<Node>)> = None;
        for (i, seg) in segs.into_iter().enumerate() {
            if let Some((g, single)) = &mut group {
                let joined = g.start..seg.lines.end;
                if self.cost(&joined) <= self.max {
                    *g = joined;
                    if seg.named {
                        *single = None;
                    }
                    continue;
                }
            }
            if self.cost(&seg.lines) <= self.max {
                if i == last && !seg.named && group.is_none() {
                    if let Some((r, _)) = out.last_mut() {
                        let joined = r.start..seg.lines.end;
                        if self.cost(&joined) <= self.max {
                            *r = joined;
                            continue;
                        }
                    }
                }
                out.extend(self.heading_of(group.take(), scope));
                group = Some((seg.lines, seg.single));
                continue;
            }
            let header = if i == 1 && out.is_empty() {
                group.take().map(|(g, _)| g)
            } else {
                None
            };
            out.extend(self.heading_of(group.take(), scope));
            let mut inner = match seg.node {
                Some(n) => {
                    let named = [seg.single, seg.node]
                        .into_iter()
                        .flatten()
                        .find_map(definition);
                    let inner_scope = match named {
                        Some(d) => self.scope_of(d, scope),
                        None => scope.to_string(),
                    };
                    self.split(n, seg.lines, &inner_scope)
                }
                None => self.lines(seg.lines, scope),
            };
            if let Some(h) = header {
                match inner.first_mut() {
                    Some((r, _)) if self.cost(&(h.start..r.end)) <= self.max => r.start = h.start,
                    _ => out.push((h, scope.to_string())),
                }
            }
            out.extend(inner);
        }
        out.extend(self.heading_of(group, scope));
        out
    }

    /// `scope` extended by `n`'s name when `n` is a definition.
    fn scope_of(&self, n: Node, scope: &str) -> String {
        if !SCOPES.contains(&n.kind()) {
            return scope.to_string();
        }
        match name_of(n, self.src) {
            Some(name) if scope.is_empty() => name,
            Some(name) => format!("{scope} > {name}"),
            None => scope.to_string(),
        }
    }

    /// A finished run and its heading: the definition it is when it is exactly one.
    fn heading_of(
        &self,
        group: Option<(Range<usize>, Option<Node>)>,
        scope: &str,
    ) -> Option<(Range<usize>, String)> {
        let (r, single) = group?;
        let heading = match single.and_then(definition) {
            Some(n) => self.scope_of(n, scope),
            None => scope.to_string(),
        };
        Some((r, heading))
    }

    /// Whole lines of a node that cannot be split further, packed under `max_tokens`.
    fn lines(&self, range: Range<usize>, scope: &str) -> Vec<(Range<usize>, String)> {
        let mut out = Vec::new();
        let mut g = range.start..range.start;
        for i in range {
            let joined = g.start..i + 1;
            if !g.is_empty() && self.cost(&joined) > self.max {
                out.push((g, scope.to_string()));
                g = i..i + 1;
            } else {
                g = joined;
            }
        }
        if !g.is_empty() {
            out.push((g, scope.to_string()));
        }
        out
    }
}

/// Chunks one file by its syntax, or by lines where it cannot (see [`SyntaxOutcome`]).
pub fn chunk_syntax(
    text: &str,
    language: &str,
    path: &str,
    max_tokens: usize,
    overlap_lines: usize,
) -> (Vec<Piece>, SyntaxOutcome) {
    let by_lines = |o| (chunk_text(text, language, max_tokens, overlap_lines), o);
    let Some((name, lang)) = grammar(language, path) else {
        return by_lines(SyntaxOutcome::Unsupported);
    };
    if text.len() > MAX_PARSE_BYTES {
        return by_lines(SyntaxOutcome::TooLarge);
    }
    let tree = PARSERS.with(|p| {
        let mut parsers = p.borrow_mut();
        let parser = match parsers.entry(name) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let mut parser = Parser::new();
                parser.set_language(&lang).ok()?;
                e.insert(parser)
            }
        };
        parser.parse(text, None)
    });
    let Some(tree) = tree.filter(|t| !t.root_node().has_error()) else {
        return by_lines(SyntaxOutcome::ParseError);
    };
    let lines = split_lines(text);
    let tokens: Vec<usize> = lines.iter().map(|l| approx_tokens(l)).collect();
    let cut = Cut {
        tokens: &tokens,
        src: text.as_bytes(),
        max: max_tokens.max(1),
    };
    let pieces = cut
        .split(tree.root_node(), 0..lines.len(), "")
        .into_iter()
        .filter_map(|(r, heading)| piece(&lines, r, heading, SYNTAX_KIND))
        .collect();
    (pieces, SyntaxOutcome::Parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PY: &str = "import os\n\n\nclass Store:\n    \"\"\"Keeps rows.\"\"\"\n\n    def __init__(self, path):\n        self.path = path\n        self.rows = []\n\n    def add(self, row):\n        self.rows.append(row)\n        return len(self.rows)\n\n    def flush(self):\n        with open(self.path, \"w\") as f:\n            for r in self.rows:\n                f.write(r)\n\n\ndef main():\n    s = Store(\"x\")\n    s.add(\"a\")\n";

    #[test]
    fn small_budget_cuts_at_methods_with_their_class_as_scope() {
        let (pieces, outcome) = chunk_syntax(PY, "python", "a.py", 40, 0);
        assert_eq!(outcome, SyntaxOutcome::Parsed);
        for p in &pieces {
            let lines = crate::text::lines_of(PY, p.start_line, p.end_line);
            assert_eq!(Some(&p.text), lines.as_ref(), "chunk text is its lines");
        }
        let flush = pieces
            .iter()
            .find(|p| p.text.contains("def flush"))
            .expect("a chunk holds flush");
        assert!(flush.text.contains("f.write(r)"), "{flush:?}");
        assert!(!flush.text.contains("def add"), "{flush:?}");
        assert!(flush.heading.starts_with("Store"), "{flush:?}");
        let main = pieces.iter().find(|p| p.text.contains("def main")).unwrap();
        assert!(!main.heading.contains("Store"), "{main:?}");
        assert!(main.text.contains("s.add(\"a\")"));
        // Every non-blank line is in exactly one chunk.
        let mut seen = vec![0; split_lines(PY).len()];
        for p in &pieces {
            for l in p.start_line..=p.end_line {
                seen[l as usize - 1] += 1;
            }
        }
        for (i, l) in split_lines(PY).iter().enumerate() {
            if !l.trim().is_empty() {
                assert_eq!(seen[i], 1, "line {} {l:?}", i + 1);
            }
        }
    }

    #[test]
    fn large_budget_keeps_the_file_whole_and_a_single_method_names_itself() {
        let (pieces, _) = chunk_syntax(PY, "python", "a.py", 5000, 0);
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[0].start_line, 1);
        let (pieces, _) = chunk_syntax(PY, "python", "a.py", 14, 0);
        assert!(
            pieces.iter().any(|p| p.heading == "Store > add"),
            "{pieces:#?}"
        );
    }

    #[test]
    fn rust_impl_methods_carry_the_type() {
        let src = "struct A;\n\nimpl A {\n    fn one(&self) -> u32 {\n        let x = 1;\n        x + 1\n    }\n\n    fn two(&self) -> u32 {\n        let y = 2;\n        y * 2\n    }\n}\n";
        let (pieces, outcome) = chunk_syntax(src, "rust", "a.rs", 25, 0);
        assert_eq!(outcome, SyntaxOutcome::Parsed);
        let two = pieces.iter().find(|p| p.text.contains("fn two")).unwrap();
        assert_eq!(two.heading, "A > two", "{pieces:#?}");
        assert!(
            two.text.ends_with("}\n}") || two.text.ends_with("    }"),
            "{pieces:#?}"
        );
        assert!(two.text.contains("y * 2"));
    }

    #[test]
    fn c_functions_are_named_through_their_declarators() {
        let src = "static int *make(int n) {\n    int *p = malloc(n);\n    return p;\n}\n\nint main(void) {\n    return 0;\n}\n";
        let (pieces, outcome) = chunk_syntax(src, "c", "a.c", 14, 0);
        assert_eq!(outcome, SyntaxOutcome::Parsed);
        assert!(pieces.iter().any(|p| p.heading == "make"), "{pieces:#?}");
        assert!(pieces.iter().any(|p| p.heading == "main"), "{pieces:#?}");
    }

    #[test]
    fn every_grammar_loads_and_parses() {
        let samples = [
            (
                "javascript",
                "a.js",
                "class A { m() { return 1; } }\nfunction f() {}\n",
            ),
            (
                "typescript",
                "a.ts",
                "interface I { x: number }\nclass A implements I { x = 1 }\n",
            ),
            ("typescript", "a.tsx", "const A = () => <div>hi</div>;\n"),
            ("go", "a.go", "package a\n\nfunc F() int {\n\treturn 1\n}\n"),
            ("java", "A.java", "class A {\n  int m() { return 1; }\n}\n"),
            ("cpp", "a.cpp", "namespace n {\nclass A { int m(); };\n}\n"),
        ];
        for (lang, path, src) in samples {
            let (pieces, outcome) = chunk_syntax(src, lang, path, 500, 0);
            assert_eq!(outcome, SyntaxOutcome::Parsed, "{lang}");
            assert_eq!(pieces.len(), 1, "{lang}");
        }
    }

    #[test]
    fn what_does_not_parse_is_chunked_by_lines() {
        let broken = "def f(:\n    return (\n";
        let (pieces, outcome) = chunk_syntax(broken, "python", "a.py", 500, 0);
        assert_eq!(outcome, SyntaxOutcome::ParseError);
        assert_eq!(pieces, chunk_text(broken, "python", 500, 0));
        let (_, outcome) = chunk_syntax("# Title\n\ntext\n", "markdown", "a.md", 500, 0);
        assert_eq!(outcome, SyntaxOutcome::Unsupported);
    }
}
