//! Shards on a real scheduler: the shipped Slurm example (`examples/slurm/shards.sbatch`) runs
//! as a job array over the bundled repositories on a one-node cluster; one array task is
//! cancelled while it runs and submitted again alone; the merge runs as a job that depends on
//! it; the merged tables equal a one-process run's (over the same vector cache), file for file.
//! Needs a running cluster (`scripts/slurm-cluster`), so it is ignored by default and
//! `scripts/test` runs it when one starts.

mod common;

use common::{root, stage_hashes};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Two variants, one of them hybrid: the shards embed (tens of seconds each on 2 cores), so a
/// task is surely running when it is cancelled. Both runs share the vector cache in `cache`, the
/// sharded one filling it first: vectors computed in other batches differ in their last bits.
fn variants(cache: &Path) -> String {
    format!(
        "[embed]\nmodel = \"{}\"\ncache_dir = \"{}\"\n\
         [[variants]]\nname = \"rank\"\nretriever = \"bm25\"\npacker = \"rank\"\nbudget = 1400\n\
         [[variants]]\nname = \"hybrid\"\nretriever = \"hybrid\"\npacker = \"compact\"\nbudget = 1400\nselector = \"calibrated\"\n",
        common::minilm_dir().display(),
        cache.display()
    )
}

const SHARDS: usize = 3;

/// A Slurm command's stdout, trimmed; panics with its stderr when it fails.
fn slurm(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Submits the shipped array script for `tasks` with the pipeline `p` (working in `dir`).
fn submit_shards(p: &Path, dir: &Path, tasks: &str) -> String {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_ri-batch"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let export = format!("ALL,PATH={path},PIPELINE={},SHARDS={SHARDS}", p.display());
    let script = root().join("examples/slurm/shards.sbatch");
    slurm(
        "sbatch",
        &[
            "--parsable",
            &format!("--array={tasks}"),
            &format!("--export={export}"),
            &format!("--chdir={}", dir.display()),
            &format!("--output={}/slurm-%A_%a.out", dir.display()),
            script.to_str().unwrap(),
        ],
    )
}

/// The state of job (or array task) `id` while the queue lists it; None once it left.
fn queued(id: &str) -> Option<String> {
    let s = slurm("squeue", &["-h", "-j", id, "-o", "%T"]);
    (!s.is_empty()).then(|| s.lines().next().unwrap_or("").to_string())
}

fn wait_gone(id: &str, limit: Duration) {
    let t0 = Instant::now();
    while queued(id).is_some() {
        assert!(
            t0.elapsed() < limit,
            "job {id} still queued after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `scontrol show job`'s JobState of a job still known to the controller.
fn final_state(id: &str) -> String {
    let s = slurm("scontrol", &["show", "job", id]);
    s.split_whitespace()
        .find_map(|w| w.strip_prefix("JobState="))
        .unwrap_or("UNKNOWN")
        .to_string()
}

#[test]
#[ignore = "needs a running Slurm cluster: scripts/slurm-cluster starts one, and scripts/test runs this when it does"]
fn the_shipped_slurm_array_with_a_killed_task_then_a_merge_equals_one_run() {
    assert!(
        Command::new("sinfo")
            .arg("-h")
            .output()
            .is_ok_and(|o| o.status.success()),
        "no Slurm cluster answers: run scripts/slurm-cluster"
    );
    common::bundled_repos();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cache = tempfile::tempdir().unwrap();
    common::bundled_plan(a.path(), &variants(cache.path()));
    common::bundled_plan(b.path(), &variants(cache.path()));
    let whole = a.path().join("pipeline.toml");
    let sharded = b.path().join("pipeline.toml");

    let array = submit_shards(&sharded, b.path(), &format!("0-{}", SHARDS - 1));
    // Task 1 is cancelled 2 s after it starts, while it embeds (tasks of 2 CPUs run one at a
    // time here).
    let task = format!("{array}_1");
    let t0 = Instant::now();
    loop {
        let state = queued(&task).expect("task 1 left the queue before it was cancelled");
        if state == "RUNNING" {
            std::thread::sleep(Duration::from_secs(2));
            slurm("scancel", &[&task]);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(900), "task 1 never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_gone(&array, Duration::from_secs(1200));
    assert_eq!(final_state(&task), "CANCELLED", "the cancelled task");
    // The task again, alone; then the merge once it has succeeded.
    let retry = submit_shards(&sharded, b.path(), "1");
    let merge = slurm(
        "sbatch",
        &[
            "--parsable",
            &format!("--dependency=afterok:{retry}"),
            &format!("--chdir={}", b.path().display()),
            &format!("--output={}/slurm-merge-%j.out", b.path().display()),
            "--wrap",
            &format!(
                "{} merge {}",
                env!("CARGO_BIN_EXE_ri-batch"),
                sharded.display()
            ),
        ],
    );
    wait_gone(&merge, Duration::from_secs(900));
    assert_eq!(final_state(&retry), "COMPLETED");
    let merge_state = final_state(&merge);
    let log = std::fs::read_to_string(b.path().join(format!("slurm-merge-{merge}.out")))
        .unwrap_or_default();
    assert_eq!(merge_state, "COMPLETED", "{log}");
    let one = common::ri_batch(&["run", whole.to_str().unwrap(), "--quiet"]);
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    assert_eq!(
        stage_hashes(&b.path().join("out")),
        stage_hashes(&a.path().join("out"))
    );
    eprintln!(
        "array {array} (task 1 cancelled while running), retry {retry}, merge {merge}: equal"
    );
}
