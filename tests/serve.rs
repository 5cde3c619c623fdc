//! `ri-batch ask` and `ri-batch serve` over a finished bundled run: answers render the lines of
//! the pinned commit verbatim, bad input gets JSON errors, the service stays on loopback unless
//! allowed, and no request fails while `/reload` swaps runs under load.

mod common;

use common::{bundled_plan, ri_batch, run_quiet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

const VARIANTS: &str = "[[variants]]\nname = \"bm25-compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 1400\nselector = \"calibrated\"\n";

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One HTTP/1.1 request; returns (status, body).
fn http(addr: &str, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connects");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw[9..12].parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (status, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(run: &Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ri-batch"))
        .args(["serve", run.to_str().unwrap(), "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    Server(child, addr)
}

#[test]
fn ask_renders_the_pinned_commits_lines_and_refuses_off_topic_questions() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(t.path(), VARIANTS);
    run_quiet(&plan);
    let out = plan.output_dir.to_str().unwrap();
    let a = ri_batch(&[
        "ask",
        out,
        "How do I parse a duration string like 2 days into milliseconds?",
        "--repo",
        "ms",
        "--json",
    ]);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let a = json(&String::from_utf8(a.stdout).unwrap());
    assert_eq!(a["outcome"], "answered", "{a:#}");
    let repo = plan.repo("ms").unwrap();
    let ri_batch::config::RepoSource::Git { path, .. } = &repo.source else {
        panic!("ms is a git repository")
    };
    let ev = a["evidence"].as_array().unwrap();
    assert!(!ev.is_empty());
    for e in ev {
        let file = e["path"].as_str().unwrap();
        let shown = Command::new("git")
            .arg("-C")
            .arg(path)
            .args(["show", &format!("HEAD:{file}")])
            .output()
            .unwrap();
        let text = String::from_utf8(shown.stdout).unwrap();
        let lines: Vec<&str> = text.split('\n').collect();
        let (s, end) = (
            e["start_line"].as_u64().unwrap(),
            e["end_line"].as_u64().unwrap(),
        );
        assert_eq!(
            e["lines"].as_str().unwrap(),
            lines[s as usize - 1..end as usize].join("\n"),
            "{file}:{s}-{end}"
        );
    }
    // An off-topic question is refused, and says so with exit status 1.
    let r = ri_batch(&[
        "ask",
        out,
        "What is the capital of Mongolia?",
        "--repo",
        "ms",
    ]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stdout).starts_with("refused"));
    // Bad input names what is wrong.
    let r = ri_batch(&["ask", out, "x", "--repo", "no-such-repo"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("no-such-repo"));
}

#[test]
fn the_service_answers_rejects_bad_input_and_reloads_under_load() {
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(t.path(), VARIANTS);
    run_quiet(&plan);
    // Off loopback only when allowed.
    let refused = ri_batch(&[
        "serve",
        plan.output_dir.to_str().unwrap(),
        "--addr",
        "0.0.0.0:0",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--allow-remote"));

    let server = serve(&plan.output_dir);
    let addr = server.1.clone();
    let (s, body) = http(&addr, "GET", "/health");
    assert_eq!((s, json(&body)["status"].clone()), (200, "ok".into()));

    let q = encode("parse a duration string into milliseconds");
    let (s, body) = http(&addr, "GET", &format!("/search?q={q}&repo=ms&k=5"));
    assert_eq!(s, 200, "{body}");
    let hits = json(&body)["hits"].as_array().unwrap().clone();
    assert_eq!(hits.len(), 5);
    assert!(hits.iter().all(|h| h["repo"] == "ms"));
    assert!(hits
        .windows(2)
        .all(|w| w[0]["score"].as_f64() >= w[1]["score"].as_f64()));

    let (s, body) = http(&addr, "GET", &format!("/answer?q={q}&repo=ms&budget=400"));
    assert_eq!(s, 200, "{body}");
    let a = json(&body);
    assert!(a["tokens"].as_u64().unwrap() <= 400);
    assert!(a["outcome"] == "answered" || a["outcome"] == "refused");

    // Bad input: JSON errors with a reason, never a dropped connection.
    for (path, status, says) in [
        ("/search?q=", 400, "empty"),
        ("/search?repo=ms", 400, "q"),
        ("/search?q=x&k=1000", 400, "k must be"),
        (
            "/search?q=x&repo=ms&retriever=dense",
            400,
            "no chunk vectors",
        ),
        (
            "/search?q=x&repo=ms&retriever=magic",
            400,
            "unknown retriever",
        ),
        ("/search?q=x&repo=ms&colour=red", 400, "colour"),
        ("/search?q=x&repo=nope", 400, "nope"),
        ("/answer?q=x&repo=ms&budget=0", 400, "budget"),
        (
            &format!("/search?q={}", "a".repeat(3000)) as &str,
            400,
            "longer",
        ),
        ("/nowhere", 404, "no such endpoint"),
        ("/search?q=%ff%fe&repo=ms", 400, "not UTF-8"),
    ] {
        let (s, body) = http(&addr, "GET", path);
        assert_eq!(s, status, "{path}: {body}");
        let e = json(&body)["error"].as_str().unwrap().to_string();
        assert!(e.contains(says), "{path}: {e}");
    }

    // A client that sends its headers a byte at a time is cut off after the header timeout, and
    // the service goes on answering.
    let mut slow = TcpStream::connect(&addr).unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut closed = false;
    for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: "
        .iter()
        .cycle()
        .take(12)
    {
        if slow.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
    if !closed {
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
    }
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(14),
        "a slow client was held {:?}",
        t0.elapsed()
    );
    assert_eq!(http(&addr, "GET", "/health").0, 200);

    // 100 clients that connect and send nothing do not keep /health waiting for them (it once
    // waited out their header timeout, 5 s).
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let t0 = std::time::Instant::now();
    assert_eq!(http(&addr, "GET", "/health").0, 200);
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(2),
        "/health waited {:?} behind idle connections",
        t0.elapsed()
    );
    drop(idle);

    // A 10 MB body is answered 413, not a dropped connection.
    let mut big = TcpStream::connect(&addr).unwrap();
    let body = vec![b'x'; 10 << 20];
    write!(
        big,
        "POST /reload HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    big.write_all(&body).unwrap();
    let mut raw = String::new();
    big.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw:.200}");
    assert!(json(raw.split_once("\r\n\r\n").unwrap().1)["error"]
        .as_str()
        .unwrap()
        .contains("4096"));

    // Three reloads while four clients search: every request succeeds.
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (addr, q, stop) = (addr.clone(), q.clone(), stop.clone());
            let (done, failed) = (done.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (s, _) = http(&addr, "GET", &format!("/search?q={q}&repo=ms&k=10"));
                    if s == 200 {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for i in 1..=3 {
        std::thread::sleep(std::time::Duration::from_millis(150));
        let (s, body) = http(&addr, "POST", "/reload");
        assert_eq!(s, 200, "{body}");
        assert_eq!(json(&body)["reloads"], i);
    }
    std::thread::sleep(std::time::Duration::from_millis(150));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert!(
        done.load(Ordering::Relaxed) > 20,
        "{}",
        done.load(Ordering::Relaxed)
    );
}

#[test]
fn commits_are_scanned_newest_first_without_emails_and_searched_by_message() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("r");
    let messages = [
        "Initial import of the parser",
        "Fix crash when the config file is empty\n\nThe loader read past the end of an empty buffer.",
        "Add retry with exponential backoff to the HTTP client",
        "Rotate the deploy key AKIAIOSFODNN7EXAMPLE",
        "Document the command line flags",
    ];
    std::fs::create_dir_all(&dir).unwrap();
    common::git(&dir, &["init", "-q", "-b", "main"]);
    for (i, m) in messages.iter().enumerate() {
        // Committed a day apart, so that newest first is well defined.
        let date = format!("2026-01-0{} 12:00:00 +0000", i + 1);
        let env = [
            ("GIT_COMMITTER_DATE", date.as_str()),
            ("GIT_AUTHOR_DATE", date.as_str()),
        ];
        std::fs::write(dir.join("README.md"), format!("# r\n\nVersion {i}.\n")).unwrap();
        common::git_env(&dir, &["add", "-A"], &env);
        common::git_env(
            &dir,
            &["-c", "commit.gpgsign=false", "commit", "-q", "-m", m],
            &env,
        );
    }
    let body = |extra: &str| {
        format!(
            "[pipeline]\nname = \"c\"\noutput_dir = \"out\"\n[scan]\nmax_commits = 3\n{extra}\
             [[repos]]\nname = \"r\"\ngit = \"{}\"\n",
            dir.display()
        )
    };
    let p = common::pipeline(t.path(), &body(""));
    let plan = ri_batch::config::Plan::load(&p).unwrap();
    run_quiet(&plan);
    let store = ri_batch::artifact::Store::new(&plan.output_dir);
    let rows: Vec<ri_batch::artifact::schema::CommitRow> = store.read().unwrap();
    // The newest three, the key's subject redacted: no secret is stored.
    let subjects: Vec<&str> = rows.iter().map(|r| r.subject.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "Document the command line flags",
            "[redacted]",
            "Add retry with exponential backoff to the HTTP client"
        ]
    );
    assert!(rows.iter().all(|r| !r.subject.contains("AKIA")));
    assert!(rows.iter().all(|r| r.author_email.is_none()));
    let head = Command::new("git")
        .arg("-C")
        .arg(&dir)
        .args(["log", "-1", "--format=%H %ct"])
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap();
    assert_eq!(head.trim(), format!("{} {}", rows[0].commit, rows[0].time));

    // All five kept (the key's commit with its subject redacted), with e-mails when asked for;
    // searched by message over HTTP.
    std::fs::write(
        &p,
        body("commit_emails = true\n").replace("max_commits = 3", "max_commits = 10"),
    )
    .unwrap();
    let plan = ri_batch::config::Plan::load(&p).unwrap();
    run_quiet(&plan);
    let rows: Vec<ri_batch::artifact::schema::CommitRow> = store.read().unwrap();
    assert_eq!(rows.len(), 5);
    assert!(rows
        .iter()
        .all(|r| r.author_email.as_deref().is_some_and(|e| e.contains('@'))));
    let server = serve(&p);
    let (status, text) = http(
        &server.1,
        "GET",
        &format!("/commits?q={}&repo=r&k=2", encode("config crash empty")),
    );
    assert_eq!(status, 200, "{text}");
    let hits = json(&text)["hits"].as_array().unwrap().clone();
    assert_eq!(
        hits[0]["subject"], "Fix crash when the config file is empty",
        "{hits:?}"
    );
    let (status, text) = http(&server.1, "GET", "/commits?q=x&repo=nope");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("nope"), "{text}");
}

#[test]
fn dense_and_hybrid_search_at_query_time_rank_as_the_batch_run_did() {
    let t = tempfile::tempdir().unwrap();
    let mut repos = String::new();
    let topics = [
        (
            "alpha",
            "parses TOML configuration files",
            "retries failed HTTP requests with backoff",
        ),
        (
            "beta",
            "renders Markdown to HTML",
            "caches rendered pages on disk",
        ),
        (
            "gamma",
            "hashes passwords with argon2",
            "rotates log files every night",
        ),
    ];
    for (name, one, two) in topics {
        common::commit_files(
            &t.path().join("repos").join(name),
            &[
                (
                    "README.md",
                    &format!("# {name}\n\n{name} {one}.\n\n## Also\n\nIt {two}.\n"),
                ),
                (
                    "docs/usage.md",
                    &format!("# Usage\n\nCall `{name}::run()`; it {one}.\n"),
                ),
                ("src/lib.rs", &format!("/// {two}\npub fn work() {{}}\n")),
            ],
            name,
        );
        repos.push_str(&format!(
            "[[repos]]\nname = \"{name}\"\ngit = \"{}\"\n",
            t.path().join("repos").join(name).display()
        ));
    }
    let questions: Vec<(&str, &str, &str)> = vec![
        ("q1", "alpha", "How are config files read?"),
        ("q2", "beta", "Where are pages cached?"),
        ("q3", "*", "password hashing"),
    ];
    let lines: String = questions
        .iter()
        .map(|(id, repo, q)| {
            format!("{{\"id\": \"{id}\", \"repo\": \"{repo}\", \"split\": \"dev\", \"answerable\": false, \"question\": \"{q}\", \"evidence\": []}}\n")
        })
        .collect();
    std::fs::write(t.path().join("questions.jsonl"), lines).unwrap();
    let p = common::pipeline(
        t.path(),
        &format!(
            "[pipeline]\nname = \"d\"\noutput_dir = \"out\"\nquestions = \"questions.jsonl\"\n{repos}\
             [embed]\nmodel = \"{}\"\n\
             [[variants]]\nname = \"bm25\"\nretriever = \"bm25\"\nbudget = 300\n\
             [[variants]]\nname = \"dense\"\nretriever = \"dense\"\nbudget = 300\n\
             [[variants]]\nname = \"hybrid\"\nretriever = \"hybrid\"\nbudget = 300\nweights = {{ bm25 = 0.5, dense = 1.0 }}\n",
            common::minilm_dir().display()
        ),
    );
    let plan = ri_batch::config::Plan::load(&p).unwrap();
    run_quiet(&plan);
    let batch: Vec<ri_batch::artifact::schema::RetrievalRow> =
        ri_batch::artifact::Store::new(&plan.output_dir)
            .read()
            .unwrap();
    let run = ri_batch::serve::Run::open(&plan.output_dir).unwrap();
    use ri_batch::config::Retriever;
    for (variant, retriever) in [
        ("bm25", Retriever::Bm25),
        ("dense", Retriever::Dense),
        ("hybrid", Retriever::Hybrid),
    ] {
        for (id, repo, q) in &questions {
            let mut want: Vec<&ri_batch::artifact::schema::RetrievalRow> = batch
                .iter()
                .filter(|r| r.variant == variant && r.question_id == *id)
                .collect();
            want.sort_by_key(|r| r.rank);
            let repo = (*repo != "*").then_some(*repo);
            let got = run.search(q, repo, want.len(), retriever).unwrap();
            let ids: Vec<&str> = got.iter().map(|h| h.chunk_id.as_str()).collect();
            let expected: Vec<&str> = want.iter().map(|r| r.chunk_id.as_str()).collect();
            assert_eq!(ids, expected, "{variant} {id}");
            for (h, w) in got.iter().zip(&want) {
                assert!(
                    (h.score - w.score).abs() < 1e-4,
                    "{variant} {id}: {} vs {}",
                    h.score,
                    w.score
                );
            }
        }
    }
}

/// Variants `ask` can answer as: BM25 pools, the three in-pool packers, both selectors that need
/// only the question.
const ANSWERING: &str = "[[variants]]\nname = \"rank-lexical\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 700\nselector = \"lexical\"\n\n[[variants]]\nname = \"marginal-lexical\"\nretriever = \"bm25\"\npacker = \"marginal-gain\"\nbudget = 700\nselector = \"lexical\"\n\n[[variants]]\nname = \"compact-calibrated\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 700\nselector = \"calibrated\"\n";

#[test]
fn an_asked_answer_is_the_extract_row_of_the_same_question_and_variant() {
    use ri_batch::artifact::outcomes::{Answer, Reason};
    use ri_batch::artifact::schema::{ExtractRow, PackRow, QuestionRow};
    let t = tempfile::tempdir().unwrap();
    let plan = bundled_plan(t.path(), ANSWERING);
    run_quiet(&plan);
    let store = ri_batch::artifact::Store::new(&plan.output_dir);
    let questions: Vec<QuestionRow> = store.read().unwrap();
    let extracts: Vec<ExtractRow> = store.read().unwrap();
    let packs: Vec<PackRow> = store.read().unwrap();
    let served = ri_batch::serve::Run::open(&plan.output_dir).unwrap();
    let (mut compared, mut answered, mut refused) = (0, 0, 0);
    for q in questions.iter().filter(|q| !q.scope.is_all()) {
        for v in ["rank-lexical", "marginal-lexical", "compact-calibrated"] {
            let e = extracts
                .iter()
                .find(|e| e.variant == v && e.question_id == q.question_id)
                .unwrap();
            let a = served
                .answer(&q.question, Some(q.scope.as_str()), None, Some(v))
                .unwrap();
            let at = format!("{v} {}", q.question_id);
            assert_eq!(a.reply, e.raw_reply, "{at}");
            assert_eq!(a.rendered, e.rendered, "{at}");
            assert_eq!(a.support, e.support, "{at}");
            let tokens: u32 = packs
                .iter()
                .filter(|p| p.variant == v && p.question_id == q.question_id)
                .map(|p| p.tokens)
                .sum();
            assert_eq!(a.tokens, tokens as usize, "{at}");
            if e.reason == Reason::Ok {
                assert_eq!(
                    (a.outcome, a.reason.as_str()),
                    (Answer::Answered, ""),
                    "{at}"
                );
                let cited: Vec<String> = a
                    .evidence
                    .iter()
                    .map(|c| format!("{}:{}-{}", c.path, c.start_line, c.end_line))
                    .collect();
                assert_eq!(cited.len(), e.accepted_ids.len(), "{at}");
                answered += 1;
            } else {
                assert_eq!(a.outcome, Answer::Refused, "{at}");
                assert_eq!(a.reason, e.reason.to_string(), "{at}");
                refused += 1;
            }
            compared += 1;
        }
    }
    eprintln!("{compared} answers compared: {answered} answered, {refused} refused");
    assert!(compared >= 150, "{compared} answers compared");
    assert!(
        answered > 20 && refused > 20,
        "{answered} answered, {refused} refused"
    );
}
