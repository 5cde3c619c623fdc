//! Shards: one run split over N processes or machines by a stable hash of the repository name.
//! Shard i of n runs the per-repository work of its repositories into
//! `<output_dir>/shards/<i>-of-<n>/`; the merge (a plain run of the same pipeline) reuses every
//! partition a shard committed whose inputs it would compute the same way, and does the
//! cross-repository work itself: the `*` scope, questions over all repositories, evaluation.

use crate::artifact::{sha256_hex, Store};
use crate::config::Plan;
pub use crate::config::Shard;
use crate::error::{Error, Result};

pub use crate::artifact::{committed_files, SHARDS_DIR};

impl Shard {
    /// Reads `I/N`, or `env/N`, where the index comes from the scheduler's environment:
    /// `JOB_COMPLETION_INDEX` (Kubernetes Indexed Jobs), else `SLURM_ARRAY_TASK_ID` (Slurm job
    /// arrays, numbered from 0: `--array=0-<N-1>`). The task id itself is the index, not its
    /// offset from the array's first task, so that a task submitted again alone
    /// (`--array=3`) is the same shard.
    pub fn parse(text: &str) -> Result<Shard> {
        Shard::parse_with(text, |k| std::env::var(k).ok())
    }

    fn parse_with(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<Shard> {
        let bad = |why: String| Error::Invalid(format!("--shard {text}: {why}"));
        let (i, n) = text
            .split_once('/')
            .ok_or_else(|| bad("expected I/N (e.g. 0/4) or env/N".into()))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| bad(format!("`{n}` is not a shard count")))?;
        if count == 0 {
            return Err(bad("the shard count must be at least 1".into()));
        }
        let index: u32 = if i.trim() == "env" {
            let number = |k: &str| -> Result<Option<u32>> {
                env(k)
                    .map(|v| {
                        v.trim()
                            .parse::<u32>()
                            .map_err(|_| bad(format!("{k}=`{v}` is not a number")))
                    })
                    .transpose()
            };
            if let Some(i) = number("JOB_COMPLETION_INDEX")? {
                i
            } else if let Some(i) = number("SLURM_ARRAY_TASK_ID")? {
                if i >= count {
                    return Err(bad(format!(
                        "SLURM_ARRAY_TASK_ID {i} is not below the shard count {count}: number the array's tasks from 0 (--array=0-{})",
                        count - 1
                    )));
                }
                i
            } else {
                return Err(bad(
                    "neither JOB_COMPLETION_INDEX nor SLURM_ARRAY_TASK_ID is set".into(),
                ));
            }
        } else {
            i.trim()
                .parse()
                .map_err(|_| bad(format!("`{i}` is not a shard index")))?
        };
        if index >= count {
            return Err(bad(format!(
                "index {index} is not below the shard count {count}"
            )));
        }
        Ok(Shard { index, count })
    }

    /// The directory name of this shard's output: `<i>-of-<n>`.
    pub fn dir_name(&self) -> String {
        format!("{}-of-{}", self.index, self.count)
    }

    /// Whether repository `name` belongs to this shard (stable: a hash of the name alone).
    pub fn owns(&self, name: &str) -> bool {
        shard_of(name, self.count) == self.index
    }

    /// The plan of this shard: its repositories only, writing under `shards/<i>-of-<n>/`.
    pub fn plan(&self, plan: &Plan) -> Plan {
        let mut p = plan.clone();
        p.repos.retain(|r| self.owns(&r.name));
        p.output_dir = plan.output_dir.join(SHARDS_DIR).join(self.dir_name());
        p.remote = plan
            .remote
            .as_ref()
            .map(|u| u.join(&format!("{SHARDS_DIR}/{}", self.dir_name())));
        p.shard = Some(*self);
        p
    }
}

/// The shard (of `count`) that repository `name` belongs to.
pub fn shard_of(name: &str, count: u32) -> u32 {
    let h = sha256_hex(name.as_bytes());
    let n = u64::from_str_radix(&h[..16], 16).expect("hex");
    (n % count as u64) as u32
}

fn parse_dir_name(name: &str) -> Option<Shard> {
    let (i, n) = name.split_once("-of-")?;
    let (index, count) = (i.parse().ok()?, n.parse().ok()?);
    (index < count).then_some(Shard { index, count })
}

/// Checks, before a merge, that every shard of one split has committed each of `stages`; the
/// error names the shard and stage missing. Returns the shard count.
pub fn check_complete(plan: &Plan, stages: &[&str]) -> Result<u32> {
    let dir = plan.output_dir.join(SHARDS_DIR);
    let found: Vec<Shard> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| parse_dir_name(&e.file_name().to_string_lossy()))
                .collect()
        })
        .unwrap_or_default();
    let Some(count) = found.iter().map(|s| s.count).max() else {
        return Err(Error::Invalid(format!(
            "{}: no shard outputs to merge; run `ri-batch run {} --shard I/N` for each I first",
            dir.display(),
            plan.config_path.display()
        )));
    };
    if let Some(other) = found.iter().find(|s| s.count != count) {
        return Err(Error::Invalid(format!(
            "{}: shards of different splits ({} and {}-of-{count}); remove the stale ones",
            dir.display(),
            other.dir_name(),
            found[0].index
        )));
    }
    for index in 0..count {
        let shard = Shard { index, count };
        let store = Store::new(dir.join(shard.dir_name()));
        for stage in stages {
            if store.manifest(stage)?.is_none() {
                return Err(Error::Invalid(format!(
                    "shard {} has not finished `{stage}` (no {}): run `ri-batch run {} --shard {index}/{count}` first",
                    shard.dir_name(),
                    store.manifest_path(stage).display(),
                    plan.config_path.display()
                )));
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_specs_parse_from_text_and_scheduler_environment() {
        let none = |_: &str| None;
        assert_eq!(
            Shard::parse_with("2/4", none).unwrap(),
            Shard { index: 2, count: 4 }
        );
        for bad in ["4/4", "1", "x/2", "0/0", "env/3"] {
            let e = Shard::parse_with(bad, none).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
        let k8s = |k: &str| (k == "JOB_COMPLETION_INDEX").then(|| "3".to_string());
        assert_eq!(Shard::parse_with("env/5", k8s).unwrap().index, 3);
        // A task submitted again alone (`--array=2`: its array's minimum is 2) is shard 2.
        let slurm = |k: &str| match k {
            "SLURM_ARRAY_TASK_ID" => Some("2".to_string()),
            "SLURM_ARRAY_TASK_MIN" => Some("2".to_string()),
            _ => None,
        };
        assert_eq!(Shard::parse_with("env/4", slurm).unwrap().index, 2);
        let one_based = |k: &str| (k == "SLURM_ARRAY_TASK_ID").then(|| "4".to_string());
        let e = Shard::parse_with("env/4", one_based)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--array=0-3"), "{e}");
    }

    #[test]
    fn every_repository_has_exactly_one_shard_and_the_split_is_even() {
        let names: Vec<String> = (0..4000).map(|i| format!("crate-{i}")).collect();
        let mut sizes = [0usize; 4];
        for n in &names {
            let owners: Vec<u32> = (0..4)
                .filter(|&i| Shard { index: i, count: 4 }.owns(n))
                .collect();
            assert_eq!(owners.len(), 1);
            sizes[owners[0] as usize] += 1;
        }
        assert!(sizes.iter().all(|&s| (900..1100).contains(&s)), "{sizes:?}");
        assert_eq!(parse_dir_name("2-of-4"), Some(Shard { index: 2, count: 4 }));
        assert_eq!(parse_dir_name("4-of-4"), None);
    }
}
