//! Output directories and embedding caches on S3-compatible object storage, against a real S3 API
//! server started on loopback by the test (moto's standalone server, from requirements-test.txt):
//! three shards, each on its own mirror (its own machine), one killed while it publishes and re-run
//! on another machine, then a merge on a fifth, give the bucket every table of a local unsharded run, with nothing
//! left that a manifest does not list; `ri-batch sql s3://…`, DuckDB (httpfs) and pyarrow read it;
//! a cache's parts reach another machine and compacted parts leave the bucket.

mod common;
#[path = "common/s3.rs"]
mod s3_server;

use common::{python, ri_batch, stage_hashes as tables};
use ri_batch::artifact::remote::Remote;
use ri_batch::artifact::RemoteUrl;
use ri_batch::artifact::VectorCache;
use s3_server::S3Server;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BUCKET: &str = "ri-batch";
const VARIANTS: &str = "[[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n\
[[variants]]\nname = \"compact\"\nretriever = \"bm25\"\npacker = \"compact\"\nbudget = 1400\nselector = \"calibrated\"\n";

fn s3_server() -> S3Server {
    S3Server::start(&python(), BUCKET)
}

fn aws_env(server: &S3Server) -> Vec<(&'static str, String)> {
    server.env()
}

fn clients(server: &S3Server, args: &[&str]) -> Output {
    server.clients(args)
}

fn command(server: &S3Server, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ri-batch"));
    cmd.args(args).envs(aws_env(server));
    cmd
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The bundled pipeline's text with its output in the bucket, worked on in `mirror`.
fn in_bucket(local: &Path, prefix: &str, mirror: &Path) -> String {
    let text = std::fs::read_to_string(local).unwrap();
    text.lines()
        .map(|l| {
            if l.starts_with("output_dir = ") {
                format!(
                    "output_dir = \"s3://{BUCKET}/{prefix}\"\nmirror_dir = \"{}\"",
                    mirror.display()
                )
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn three_shards_into_s3_then_a_merge_equal_a_local_run() {
    let s3 = s3_server();
    let t = tempfile::tempdir().unwrap();
    let local = t.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    common::bundled_plan(&local, VARIANTS);
    let whole = local.join("pipeline.toml");
    let t0 = Instant::now();
    ok(ri_batch(&["run", whole.to_str().unwrap(), "--quiet"]));
    let elapsed = t0.elapsed();
    let reference = tables(&local.join("out"));

    // Each shard and the merge on its own machine: its own mirror, nothing shared but the bucket.
    let prefix = "nightly/bundled";
    let machine = |name: &str| {
        let p = t.path().join(format!("{name}.toml"));
        std::fs::write(&p, in_bucket(&whole, prefix, &t.path().join(name))).unwrap();
        p.to_string_lossy().into_owned()
    };
    let shard_files: Vec<String> = (0..3).map(|i| machine(&format!("shard{i}"))).collect();

    // Shard 1 is killed as soon as its mirror has committed `chunk`, while it publishes that
    // stage; what the bucket then holds is whole (every manifest's files there, at their size:
    // `sql` checks) or not there at all.
    let mut first = command(&s3, &["run", &shard_files[1], "--shard", "1/3", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let committed = t.path().join(format!(
        "shard1/{BUCKET}/{prefix}/shards/1-of-3/chunk/manifest.json"
    ));
    let t0 = Instant::now();
    while !committed.exists() && first.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < 4 * elapsed + Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = first.kill();
    first.wait().unwrap();
    let seen = command(
        &s3,
        &[
            "sql",
            &format!("s3://{BUCKET}/{prefix}/shards/1-of-3"),
            "SELECT count(*) AS n FROM files",
        ],
    )
    .output()
    .unwrap();
    // `scan` was published before `chunk` ran: it reads whole; `chunk` is not visible yet.
    assert!(
        seen.status.success(),
        "a killed shard left a partial stage visible: {}",
        String::from_utf8_lossy(&seen.stderr)
    );
    let chunks = command(
        &s3,
        &[
            "sql",
            &format!("s3://{BUCKET}/{prefix}/shards/1-of-3"),
            "SELECT count(*) AS n FROM chunks",
        ],
    )
    .output()
    .unwrap();
    let why = String::from_utf8_lossy(&chunks.stderr);
    assert!(
        chunks.status.success() || why.contains("not found"),
        "{why}"
    );

    // The three run at once; shard 1 again, but on another machine (a fresh mirror): it resumes
    // from what the bucket holds and clears what the killed run left there.
    let rerun = machine("shard1-again");
    let shards: Vec<Child> = (0..3)
        .map(|i| {
            let file = if i == 1 { &rerun } else { &shard_files[i] };
            command(&s3, &["run", file, "--shard", &format!("{i}/3"), "--quiet"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for s in shards {
        ok(s.wait_with_output().unwrap());
    }

    let merger = machine("merger");
    let merged = ok(command(&s3, &["merge", &merger]).output().unwrap());
    let said = String::from_utf8_lossy(&merged.stderr);
    assert!(said.contains("3 shards"), "{said}");
    let mirror = t.path().join(format!("merger/{BUCKET}/{prefix}"));
    assert_eq!(
        tables(&mirror),
        reference,
        "merged tables equal one local run's"
    );

    // A sixth machine sees a complete run in the bucket: everything is pulled, nothing re-runs.
    let reader = machine("reader");
    let again = ok(command(&s3, &["run", &reader]).output().unwrap());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("0 stages ran, 8 skipped"), "{said}");
    let pulled = t.path().join(format!("reader/{BUCKET}/{prefix}"));
    assert_eq!(tables(&pulled), reference);

    // The bucket holds what the manifests list (pulled whole above), the manifests, the run record
    // and the report; nothing a killed shard or an old run left.
    let keys = ok(clients(&s3, &["keys", BUCKET, prefix]));
    let keys = String::from_utf8_lossy(&keys.stdout).to_string();
    assert!(keys.lines().count() > 100, "{keys}");
    for key in keys.lines() {
        assert!(
            pulled.join(key).is_file() || key.ends_with("report.html") || key.ends_with("run.json"),
            "an object no manifest lists: {key}"
        );
    }

    // SQL over the bucket answers as over the local directory.
    let query = "SELECT variant, count(*) AS n, sum(packed_recall) AS r FROM evaluation GROUP BY variant ORDER BY variant";
    let here = ok(ri_batch(&[
        "sql",
        local.join("out").to_str().unwrap(),
        query,
        "--format",
        "csv",
    ]));
    let there = ok(command(
        &s3,
        &[
            "sql",
            &format!("s3://{BUCKET}/{prefix}"),
            query,
            "--format",
            "csv",
        ],
    )
    .output()
    .unwrap());
    assert_eq!(
        String::from_utf8_lossy(&there.stdout),
        String::from_utf8_lossy(&here.stdout)
    );

    // The schema lists every table; the memory-mapped BM25 index (Arrow IPC) is named, with the
    // reason it is read from a mirror only, and a query on it says so.
    let url = format!("s3://{BUCKET}/{prefix}");
    let schema = ok(command(&s3, &["sql", &url, "--schema"]).output().unwrap());
    let schema = String::from_utf8_lossy(&schema.stdout).to_string();
    assert!(
        schema.contains("evaluation\n") && schema.contains("bm25_index\n  (Arrow IPC"),
        "{schema}"
    );
    let ipc = command(&s3, &["sql", &url, "SELECT count(*) FROM bm25_index"])
        .output()
        .unwrap();
    assert!(!ipc.status.success());
    assert!(
        String::from_utf8_lossy(&ipc.stderr).contains("mirror"),
        "{}",
        String::from_utf8_lossy(&ipc.stderr)
    );

    // DuckDB (httpfs, pointed at the endpoint) and pyarrow's S3 filesystem read the results.
    let read = ok(clients(&s3, &["read", BUCKET, prefix]));
    let got: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    let sums = ok(ri_batch(&[
        "sql",
        local.join("out").to_str().unwrap(),
        "SELECT count(*) AS n, sum(pool_recall) AS r FROM evaluation",
        "--format",
        "json",
    ]));
    let sums: serde_json::Value = serde_json::from_slice(&sums.stdout).unwrap();
    let (n, r) = (
        sums[0]["n"].as_u64().unwrap(),
        sums[0]["r"].as_f64().unwrap(),
    );
    for client in ["duckdb", "pyarrow"] {
        assert_eq!(got[format!("{client}_rows")].as_u64(), Some(n), "{got}");
        let recall = got[format!("{client}_pool_recall")].as_f64().unwrap();
        assert!((recall - r).abs() < 1e-9, "{client}: {recall} vs {r}");
    }
}

#[test]
fn a_cache_in_the_bucket_reaches_another_machine_and_compacted_parts_leave_it() {
    let s3 = s3_server();
    for (k, v) in aws_env(&s3) {
        std::env::set_var(k, v);
    }
    let t = tempfile::tempdir().unwrap();
    let url = RemoteUrl::parse(&format!("s3://{BUCKET}/caches/e"))
        .unwrap()
        .unwrap();
    let remote = Remote::connect(&url).unwrap();
    let sub = VectorCache::dir_name("m", 2);
    let (a, b) = (t.path().join("a"), t.path().join("b"));

    // Machine A writes 70 small parts and publishes them.
    let mut cache = VectorCache::open(&a, "m", 2).unwrap();
    for i in 0..70 {
        cache
            .append(vec![(format!("h{i}"), vec![i as f32, 1.0])])
            .unwrap();
    }
    drop(cache);
    let pushed = remote
        .push_dir(&a.join(&sub), &sub, &VectorCache::compacted(&a.join(&sub)))
        .unwrap();
    assert_eq!(pushed.objects, 70);

    // Machine B fetches them and finds every vector.
    let pulled = remote
        .pull_dir(&b.join(&sub), &sub, &Default::default())
        .unwrap();
    assert_eq!(pulled.objects, 70);
    let hashes: Vec<String> = (0..70).map(|i| format!("h{i}")).collect();
    let got = VectorCache::open(&b, "m", 2)
        .unwrap()
        .get_many(&hashes)
        .unwrap();
    assert_eq!(got[69], vec![69.0, 1.0]);

    // A compacts (alone with its mirror): the compacted part goes up, the small ones leave the
    // bucket, and a third machine fetches one part, not 71.
    drop(VectorCache::open(&a, "m", 2).unwrap());
    let tomb = VectorCache::compacted(&a.join(&sub));
    assert_eq!(tomb.len(), 70);
    let pushed = remote.push_dir(&a.join(&sub), &sub, &tomb).unwrap();
    assert_eq!((pushed.objects, pushed.deleted), (1, 70));
    let c = t.path().join("c");
    let pulled = remote
        .pull_dir(&c.join(&sub), &sub, &Default::default())
        .unwrap();
    assert_eq!(pulled.objects, 1);
    let got = VectorCache::open(&c, "m", 2)
        .unwrap()
        .get_many(&hashes)
        .unwrap();
    assert_eq!(got[7], vec![7.0, 1.0]);

    // A bucket that does not exist is an error that names it.
    let missing = RemoteUrl::parse("s3://no-such-bucket/x").unwrap().unwrap();
    let err = Remote::connect(&missing)
        .unwrap()
        .pull(t.path())
        .expect_err("no bucket");
    assert!(err.to_string().contains("s3://no-such-bucket"), "{err}");
}

#[test]
fn shards_on_two_machines_share_vectors_through_a_cache_in_the_bucket() {
    let s3 = s3_server();
    let t = tempfile::tempdir().unwrap();
    let mut repos = String::new();
    for (i, name) in ["alpha", "beta", "gamma"].iter().enumerate() {
        let dir = t.path().join("repos").join(name);
        common::commit_files(
            &dir,
            &[(
                "README.md",
                &format!("# {name}\n\n{name} reads configuration files.\n\n## Install\n\nRun make install {i} times.\n"),
            )],
            name,
        );
        repos.push_str(&format!(
            "[[repos]]\nname = \"{name}\"\ngit = \"{}\"\n",
            dir.display()
        ));
    }
    let questions = t.path().join("questions.jsonl");
    let q: String = ["alpha", "beta", "gamma", "*"]
        .iter()
        .map(|name| {
            format!(
                "{{\"id\": \"q-{}\", \"repo\": \"{name}\", \"split\": \"dev\", \"answerable\": false, \"question\": \"How do I install it?\", \"evidence\": []}}\n",
                name.replace('*', "all")
            )
        })
        .collect();
    std::fs::write(&questions, q).unwrap();
    // Each machine its own mirror; the cache defaults to `s3://ri-batch/e/.embedding-cache`.
    let machine = |name: &str, out: &str| {
        let p = t.path().join(format!("{name}.toml"));
        std::fs::write(
            &p,
            format!(
                "[pipeline]\nname = \"e\"\noutput_dir = \"s3://{BUCKET}/e/{out}\"\nmirror_dir = \"{}\"\nquestions = \"{}\"\n{repos}\
                 [embed]\nmodel = \"{}\"\n\
                 [[variants]]\nname = \"dense\"\nretriever = \"dense\"\nbudget = 300\n\
                 [[variants]]\nname = \"hybrid\"\nretriever = \"hybrid\"\nbudget = 300\n",
                t.path().join(name).display(),
                questions.display(),
                common::minilm_dir().display()
            ),
        )
        .unwrap();
        p.to_string_lossy().into_owned()
    };
    let first = machine("a", "one");
    ok(command(&s3, &["run", &first, "--quiet"]).output().unwrap());
    let keys = ok(clients(&s3, &["keys", BUCKET, "e/.embedding-cache"]));
    let parts = String::from_utf8_lossy(&keys.stdout)
        .lines()
        .filter(|k| k.ends_with(".parquet"))
        .count();
    assert!(parts >= 1, "the cache's parts are in the bucket");

    // Two shards on two other machines find every vector in the bucket's cache.
    for (i, name) in ["b", "c"].iter().enumerate() {
        let p = machine(name, "two");
        ok(
            command(&s3, &["run", &p, "--shard", &format!("{i}/2"), "--quiet"])
                .output()
                .unwrap(),
        );
        let embed = ri_batch::artifact::Store::new(
            t.path()
                .join(format!("{name}/{BUCKET}/e/two/shards/{i}-of-2")),
        )
        .manifest("embed")
        .unwrap()
        .unwrap();
        assert_eq!(
            embed.stats["embedded_texts"], 0,
            "shard {i}: {:?}",
            embed.stats
        );
        assert!(embed.stats["cache_parts_pulled"].as_u64().unwrap() >= 1);
    }
    let merger = machine("d", "two");
    ok(command(&s3, &["merge", &merger, "--quiet"])
        .output()
        .unwrap());
    assert_eq!(
        tables(&t.path().join(format!("d/{BUCKET}/e/two"))),
        tables(&t.path().join(format!("a/{BUCKET}/e/one")))
    );
}
