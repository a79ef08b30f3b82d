//! `run.json`, the run's header: who ran which tasks how, and the identity a shard or a
//! resumed run must share with the directory, or it would mix two runs' results. It is
//! written once (linked into place, so two shards starting together cannot both write it)
//! and read typed by everything that needs it.

use super::{DirError, host, io};
use crate::agent::correction::Correction;
use crate::agent::observe::ObservationConfig;
use crate::task::{EndRule, Task};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What identifies a run: a shard or a resumed run must agree with the directory's
/// `run.json` on these, or it would mix two runs' results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// Agent name.
    pub agent: String,
    /// Base seed.
    pub seed: u64,
    /// Shards (`None`: not sharded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// Task ids, in order (only compared for sharded runs: the deal depends on them).
    pub tasks: Vec<String>,
    /// Repeats (as for `tasks`).
    pub repeat: u32,
    /// What agents see (`None` in runs written before it was recorded, and then not
    /// compared).
    #[serde(default)]
    pub observation: Option<ObservationConfig>,
    /// A hash of the tasks as run (only compared for sharded runs: every shard must run
    /// the same task files; empty when not recorded).
    #[serde(default)]
    pub tasks_sha256: String,
    /// How agents may correct themselves (feedback, attempts; runs written before it was
    /// recorded had none and one).
    #[serde(default)]
    pub correction: Correction,
    /// What ended every task run (`--end`), if the run set it; written only then, so runs
    /// from before it existed keep their identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<EndRule>,
    /// Whether tasks that need the live web ran (`--allow-network`): such a run is not
    /// hermetic. Written only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// The peer benchmark the run scored as (`--compat crab`), if any. Written only when
    /// set; a run is resumed only under the same scoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<crate::task::compat::Compat>,
}

impl Identity {
    /// The identity of a run of `tasks` (in order) by `agent`.
    pub fn new(
        agent: &str,
        tasks: &[Task],
        repeat: u32,
        seed: u64,
        shards: Option<u32>,
        observation: ObservationConfig,
        correction: Correction,
    ) -> Self {
        let tasks_text = serde_json::to_string(tasks).unwrap_or_default();
        Self {
            agent: agent.to_owned(),
            seed,
            shards,
            tasks: tasks.iter().map(|t| t.id.clone()).collect(),
            repeat,
            observation: Some(observation),
            tasks_sha256: crate::image::build::hex(
                ring::digest::digest(&ring::digest::SHA256, tasks_text.as_bytes()).as_ref(),
            ),
            correction,
            end: None,
            network: false,
            compat: None,
        }
    }

    /// How `self` (the directory's) differs from `other` (this process's), if it does.
    pub fn difference(&self, other: &Self) -> Option<String> {
        let mut diffs = Vec::new();
        if self.agent != other.agent {
            diffs.push(format!("agent '{}' (here: '{}')", self.agent, other.agent));
        }
        if self.seed != other.seed {
            diffs.push(format!("seed {} (here: {})", self.seed, other.seed));
        }
        let shards = |s: Option<u32>| s.map_or("not sharded".into(), |n| format!("{n} shards"));
        if self.shards != other.shards {
            diffs.push(format!(
                "{} (here: {})",
                shards(self.shards),
                shards(other.shards)
            ));
        }
        if self.shards.is_some() && self.tasks != other.tasks {
            diffs.push(format!(
                "tasks {} (here: {})",
                self.tasks.join(","),
                other.tasks.join(",")
            ));
        }
        if self.shards.is_some() && self.repeat != other.repeat {
            diffs.push(format!("repeat {} (here: {})", self.repeat, other.repeat));
        }
        if let (Some(ours), Some(theirs)) = (&self.observation, &other.observation)
            && ours != theirs
        {
            let json = |o: &ObservationConfig| serde_json::to_string(o).unwrap_or_default();
            diffs.push(format!(
                "observation {} (here: {})",
                json(ours),
                json(theirs)
            ));
        }
        if self.correction != other.correction {
            let c = |c: &Correction| format!("--feedback {} --attempts {}", c.feedback, c.attempts);
            diffs.push(format!(
                "{} (here: {})",
                c(&self.correction),
                c(&other.correction)
            ));
        }
        if self.end != other.end {
            let e = |e: Option<EndRule>| {
                e.map_or("each task's end rule".into(), |e| format!("--end {e}"))
            };
            diffs.push(format!("{} (here: {})", e(self.end), e(other.end)));
        }
        if self.compat != other.compat {
            let c = |c: Option<crate::task::compat::Compat>| {
                c.map_or("pincer's own scoring".into(), |c| format!("--compat {c}"))
            };
            diffs.push(format!("{} (here: {})", c(self.compat), c(other.compat)));
        }
        if self.network != other.network {
            let n = |on: bool| if on { "--allow-network" } else { "no network" };
            diffs.push(format!("{} (here: {})", n(self.network), n(other.network)));
        }
        let (ours, theirs) = (&self.tasks_sha256, &other.tasks_sha256);
        if self.shards.is_some() && !ours.is_empty() && !theirs.is_empty() && ours != theirs {
            diffs.push("other task files (here: the files changed since the run began)".into());
        }
        (!diffs.is_empty()).then(|| diffs.join(", "))
    }
}

/// A run's header, `run.json`: its identity and, once a process runs it unsharded, the
/// environment sets that ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunHeader {
    /// What a shard or a resumed run must agree on.
    #[serde(flatten)]
    pub identity: Identity,
    /// Each environment set's name and roles (`s0`: desktop, phone), for the report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<(String, Vec<String>)>,
}

/// More task runs than any run has: a header that claims more is not a run's.
const MAX_TASK_RUNS: usize = 10_000_000;

impl RunHeader {
    /// The header of a run with this identity, before any set is known.
    pub fn new(identity: Identity) -> Self {
        Self {
            identity,
            sets: Vec::new(),
        }
    }

    /// Reads a directory's `run.json`, if there is one; one that is not a pincer run's
    /// header (or claims more task runs than any run has) is an error.
    pub fn read(dir: &Path) -> Result<Option<Self>, DirError> {
        let path = dir.join("run.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
        };
        let bad = |what: String| {
            io(format!("reading {}", path.display()))(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{what}: this is not a pincer run's header; choose another --out"),
            ))
        };
        let header: Self = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let id = &header.identity;
        if id.shards == Some(0) {
            return Err(bad("\"shards\": 0".into()));
        }
        if id.tasks.len().saturating_mul(id.repeat as usize) > MAX_TASK_RUNS {
            return Err(bad(format!(
                "{} tasks x {} repeats is more than {MAX_TASK_RUNS} task runs",
                id.tasks.len(),
                id.repeat
            )));
        }
        Ok(Some(header))
    }

    /// Writes this header as `run.json`, replacing one there (a run that owns the
    /// directory, its lock held).
    pub fn write(&self, dir: &Path) -> Result<(), DirError> {
        super::write_json(&dir.join("run.json"), self)
    }

    /// Writes this header as `run.json` unless the directory has one; then checks that the
    /// one it has is this run's. Atomic across machines: the header is written aside and
    /// linked into place, which fails if another shard got there first.
    pub fn claim(&self, dir: &Path) -> Result<(), DirError> {
        let path = dir.join("run.json");
        if !path.exists() {
            let aside = dir.join(format!(".run.json.{}.{}", host(), std::process::id()));
            let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other);
            text.and_then(|t| std::fs::write(&aside, t))
                .map_err(io(format!("writing {}", aside.display())))?;
            let linked = std::fs::hard_link(&aside, &path);
            let _ = std::fs::remove_file(&aside);
            match linked {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(format!("writing {}", path.display()))(e)),
            }
        }
        check_same(dir, &self.identity)
    }
}

/// Refuses a directory whose `run.json` is another run's.
pub(super) fn check_same(dir: &Path, me: &Identity) -> Result<(), DirError> {
    match RunHeader::read(dir)? {
        Some(theirs) => match theirs.identity.difference(me) {
            Some(diff) => Err(DirError::OtherRun {
                dir: dir.to_owned(),
                diff,
            }),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::correction::Feedback;

    fn marks(on: bool) -> ObservationConfig {
        ObservationConfig {
            marks: on,
            ..ObservationConfig::parse("", None).unwrap()
        }
    }

    #[test]
    fn identities_name_what_differs() {
        let a = Identity {
            agent: "oracle".into(),
            seed: 0,
            shards: Some(3),
            tasks: vec!["t".into()],
            repeat: 1,
            observation: Some(marks(true)),
            tasks_sha256: "aa".into(),
            correction: Correction::default(),
            end: None,
            network: false,
            compat: None,
        };
        assert_eq!(a.difference(&a.clone()), None);
        let crab = Identity {
            compat: Some(crate::task::compat::Compat::Crab),
            ..a.clone()
        };
        assert_eq!(
            crab.difference(&a).as_deref(),
            Some("--compat crab (here: pincer's own scoring)")
        );
        let retried = Identity {
            correction: Correction::new(Feedback::End, 3).unwrap(),
            ..a.clone()
        };
        assert_eq!(
            a.difference(&retried).unwrap(),
            "--feedback none --attempts 1 (here: --feedback end --attempts 3)"
        );
        let b = Identity {
            agent: "random".into(),
            shards: Some(2),
            ..a.clone()
        };
        let d = a.difference(&b).unwrap();
        assert!(d.contains("agent 'oracle' (here: 'random')"), "{d}");
        assert!(d.contains("3 shards (here: 2 shards)"), "{d}");
        let e = Identity {
            observation: Some(marks(false)),
            tasks_sha256: "bb".into(),
            ..a.clone()
        };
        let d = a.difference(&e).unwrap();
        assert!(
            d.contains(r#"observation {"screenshot":false,"marks":true"#)
                && d.contains(r#"(here: {"screenshot":false,"marks":false"#),
            "{d}"
        );
        assert!(d.contains("other task files"), "{d}");
        // Not recorded (an older run.json): not compared.
        let old = Identity {
            observation: None,
            tasks_sha256: String::new(),
            ..a.clone()
        };
        assert_eq!(old.difference(&e), None);
        // Unsharded runs may resume with another selection of tasks.
        let c = Identity {
            shards: None,
            ..a.clone()
        };
        let d2 = Identity {
            tasks: vec!["u".into()],
            repeat: 3,
            ..c.clone()
        };
        assert_eq!(c.difference(&d2), None);
    }

    /// The header is read back as written, and headers written before a field existed
    /// (no observation, correction, hash or shards) still read.
    #[test]
    fn headers_read_back_typed_old_ones_too() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(RunHeader::read(dir.path()).unwrap(), None);
        let header = RunHeader {
            identity: Identity::new(
                "oracle",
                &[],
                2,
                7,
                None,
                marks(true),
                Correction::default(),
            ),
            sets: vec![("s0".into(), vec!["desktop".into()])],
        };
        header.write(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join("run.json")).unwrap();
        assert!(
            !text.contains("shards"),
            "unsharded runs say nothing of shards: {text}"
        );
        assert_eq!(RunHeader::read(dir.path()).unwrap(), Some(header));

        std::fs::write(
            dir.path().join("run.json"),
            r#"{"agent": "a", "tasks": ["t"], "repeat": 1, "seed": 0, "sets": [["s0", ["desktop"]]]}"#,
        )
        .unwrap();
        let old = RunHeader::read(dir.path()).unwrap().unwrap();
        assert_eq!(old.identity.observation, None);
        assert_eq!(old.identity.correction, Correction::default());
        assert_eq!(
            old.sets,
            vec![("s0".to_owned(), vec!["desktop".to_owned()])]
        );

        for (bad, says) in [
            (r#"{"agent": "a"}"#, "missing field"),
            (
                r#"{"agent": "a", "tasks": [], "repeat": 1, "seed": 0, "shards": 0}"#,
                "\"shards\": 0",
            ),
        ] {
            std::fs::write(dir.path().join("run.json"), bad).unwrap();
            let e = RunHeader::read(dir.path()).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("not a pincer run's header"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_claimed_directory_refuses_another_run() {
        let dir = tempfile::tempdir().unwrap();
        let id = |agent: &str| {
            Identity::new(
                agent,
                &[],
                1,
                0,
                Some(2),
                marks(true),
                Correction::default(),
            )
        };
        RunHeader::new(id("oracle")).claim(dir.path()).unwrap();
        // The same run (another shard) joins it.
        RunHeader::new(id("oracle")).claim(dir.path()).unwrap();
        let e = RunHeader::new(id("random"))
            .claim(dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("holds another run") && e.contains("agent 'oracle'"),
            "{e}"
        );
    }
}
