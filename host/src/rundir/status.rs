//! `pincer run status DIR`: a run's progress from its directory alone, per shard and
//! overall, whoever runs it (this machine, Slurm, Kubernetes) and while it runs.

use super::shard::{self, Done, Started};
use super::{DirError, RunHeader, TaskRecord, io};
use crate::metrics::Termination;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One shard's progress (or the whole run's, unsharded).
#[derive(Debug, Clone)]
pub struct ShardStatus {
    /// Shard index (`None`: an unsharded run).
    pub index: Option<u32>,
    /// Task runs it owns.
    pub share: usize,
    /// Of those, finished.
    pub finished: usize,
    /// Of those, successful.
    pub successes: usize,
    /// Where and when it (last) started.
    pub started: Option<Started>,
    /// Whether it says its share is complete.
    pub done: Option<Done>,
    /// Whether a process holds it now.
    pub running: bool,
}

impl ShardStatus {
    /// One word for its state.
    pub fn state(&self) -> &'static str {
        match (&self.done, self.running, &self.started) {
            (Some(_), _, _) => "done",
            (None, true, _) => "running",
            (None, false, Some(_)) => "stopped",
            (None, false, None) => "not started",
        }
    }
}

/// A run's progress.
#[derive(Debug, Clone)]
pub struct RunStatus {
    /// The run directory.
    pub dir: PathBuf,
    /// Agent.
    pub agent: String,
    /// Task runs in the run.
    pub total: usize,
    /// Per shard (one row if unsharded).
    pub shards: Vec<ShardStatus>,
    /// Records of task runs that another record already finished (0 in a sound run).
    pub duplicates: usize,
}

impl RunStatus {
    /// Finished task runs, all shards.
    pub fn finished(&self) -> usize {
        self.shards.iter().map(|s| s.finished).sum()
    }

    /// Whether every shard's share is finished.
    pub fn complete(&self) -> bool {
        self.finished() == self.total
    }
}

/// Reads a run's progress from its directory.
pub fn read(dir: &Path) -> Result<RunStatus, DirError> {
    let Some(RunHeader { identity: id, .. }) = RunHeader::read(dir)? else {
        return Err(DirError::NotARun(dir.to_owned()));
    };
    let repeat = id.repeat.max(1) as usize;
    let total = id.tasks.len() * repeat;
    // The owner of each task run, by the runner's order.
    let mut owner: BTreeMap<(String, u32), u32> = BTreeMap::new();
    let count = id.shards.unwrap_or(1);
    let deal: Vec<shard::Shard> = (0..count)
        .map(|index| shard::Shard { index, count })
        .collect();
    for r in 0..repeat as u32 {
        for (i, t) in id.tasks.iter().enumerate() {
            let nth = r as usize * id.tasks.len() + i;
            if let Some(s) = deal.iter().find(|s| s.owns(nth)) {
                owner.insert((t.clone(), r), s.index);
            }
        }
    }
    let records: Vec<TaskRecord> =
        shard::read_all(dir).map_err(io(format!("reading {}", dir.display())))?;
    let mut seen: BTreeMap<(String, u32), (usize, bool)> = BTreeMap::new();
    let mut duplicates = 0;
    for r in &records {
        if r.termination == Termination::Aborted {
            continue;
        }
        let e = seen.entry((r.task.clone(), r.repeat)).or_default();
        if e.0 > 0 {
            duplicates += 1;
        }
        e.0 += 1;
        e.1 = r.termination == Termination::Success;
    }
    let shards = (0..count)
        .map(|k| {
            let mine = owner.iter().filter(|(_, o)| **o == k);
            let share = mine.clone().count();
            let finished: Vec<bool> = mine
                .filter_map(|(key, _)| seen.get(key))
                .map(|e| e.1)
                .collect();
            let d = match id.shards {
                Some(_) => shard::dir(dir, k),
                None => dir.to_owned(),
            };
            ShardStatus {
                index: id.shards.map(|_| k),
                share,
                finished: finished.len(),
                successes: finished.iter().filter(|s| **s).count(),
                started: super::read_json(&d.join("started.json")),
                done: super::read_json(&d.join("done.json")),
                running: shard::held(&d),
            }
        })
        .collect();
    Ok(RunStatus {
        dir: dir.to_owned(),
        agent: id.agent,
        total,
        shards,
        duplicates,
    })
}

fn ago(ms: u64) -> String {
    let s = crate::clock::unix_ms().saturating_sub(ms) / 1000;
    match s {
        0..120 => format!("{s} s ago"),
        120..7200 => format!("{} min ago", s / 60),
        _ => format!("{} h ago", s / 3600),
    }
}

fn rate(successes: usize, finished: usize) -> String {
    if finished == 0 {
        "-".into()
    } else {
        format!("{:.0}%", successes as f64 * 100.0 / finished as f64)
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "run {}: agent {}, {} task runs{}",
            self.dir.display(),
            self.agent,
            self.total,
            match self.shards.len() {
                1 if self.shards[0].index.is_none() => String::new(),
                n => format!(" in {n} shards"),
            }
        )?;
        writeln!(
            f,
            "{:<6} {:<12} {:>9} {:>5}  state",
            "shard", "host", "finished", "SR"
        )?;
        for s in &self.shards {
            let host = s.started.as_ref().map_or("-", |st| st.host.as_str());
            let when = match (&s.done, &s.started) {
                (Some(d), _) => format!(" {}", ago(d.at_ms)),
                (None, Some(st)) => format!(
                    " (started {}{})",
                    ago(st.at_ms),
                    st.job
                        .as_ref()
                        .map(|j| format!(", {j}"))
                        .unwrap_or_default()
                ),
                _ => String::new(),
            };
            writeln!(
                f,
                "{:<6} {:<12} {:>9} {:>5}  {}{when}",
                s.index.map_or("-".into(), |k| k.to_string()),
                host,
                format!("{}/{}", s.finished, s.share),
                rate(s.successes, s.finished),
                s.state()
            )?;
        }
        let successes: usize = self.shards.iter().map(|s| s.successes).sum();
        write!(
            f,
            "{:<6} {:<12} {:>9} {:>5}  {}",
            "all",
            "",
            format!("{}/{}", self.finished(), self.total),
            rate(successes, self.finished()),
            if self.complete() {
                "complete"
            } else {
                "incomplete"
            }
        )?;
        if self.duplicates > 0 {
            write!(
                f,
                "\nwarning: {} task runs were recorded more than once",
                self.duplicates
            )?;
        }
        Ok(())
    }
}
