//! Evaluation: the library of checkpoint functions ([`functions`]) and the graph evaluator
//! with CRAB's semantics ([`graph`]). UI-tree checks find their nodes with the tasks'
//! selectors ([`crate::task::selector`]).
//!
//! A checkpoint function is built once from its JSON arguments into a [`Check`]: a fixed
//! list of read-only probes it needs from its environment, and a judgement over their
//! replies (and the agent's own log) that returns a [`Verdict`] with one line of feedback
//! saying what was observed. Because probes are known up front, the graph evaluator can
//! read every check that is due in one `Batch` round trip per environment.
//!
//! The evaluator also reads ahead: with the checks that are due it fetches the probes of
//! their successors, so a cascade one level deep costs no extra round trip. Those
//! successors are not ready yet and their predecessors usually keep failing, so such reads
//! happen every step for nothing; only probes that are cheap and have no effects may be
//! fetched that way ([`prefetchable`]): file metadata and contents, directory listings, the
//! process table, windows, the clipboard and environment variables. A check that needs a
//! command (`command_output_matches`, the content hash of `wallpaper_is`), a GSettings read
//! (a program the guest spawns) or the UI tree (up to seconds of AT-SPI calls) is read only
//! once its checkpoint is ready, at the cost of one more round trip when it becomes ready in
//! a cascade.

pub mod functions;
pub mod graph;
pub mod text;

use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::{Action, WireError};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

/// A probe's outcome as the batch returned it.
pub type ProbeResult = Result<ProbeReply, WireError>;

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the checkpoint holds.
    pub passed: bool,
    /// What was observed, in one line ("file /tmp/a.txt reads 'helo', expected text equal to
    /// 'hello'").
    pub feedback: String,
    /// A score between 0 and 1, for checks that grade rather than decide (a peer
    /// benchmark's own metric); such a check passes only with a full score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// How close to 1 a score must be to count as full.
const FULL: f64 = 1e-9;

impl Verdict {
    /// A passing verdict.
    pub fn pass(feedback: impl Into<String>) -> Self {
        Self {
            passed: true,
            feedback: feedback.into(),
            score: None,
        }
    }

    /// A failing verdict.
    pub fn fail(feedback: impl Into<String>) -> Self {
        Self {
            passed: false,
            feedback: feedback.into(),
            score: None,
        }
    }

    /// A graded verdict: `score` (clamped to 0..=1), passing only when it is full.
    pub fn scored(score: f64, feedback: impl Into<String>) -> Self {
        let score = if score.is_nan() {
            0.0
        } else {
            score.clamp(0.0, 1.0)
        };
        Self {
            passed: score >= 1.0 - FULL,
            feedback: feedback.into(),
            score: Some(score),
        }
    }

    /// The verdict's score: its grade, else 1 for a pass and 0 for a fail.
    pub fn grade(&self) -> f64 {
        self.score.unwrap_or(if self.passed { 1.0 } else { 0.0 })
    }

    /// Passing iff `cond`, with the feedback for each case.
    pub fn when(cond: bool, pass: impl Into<String>, fail: impl Into<String>) -> Self {
        if cond {
            Self::pass(pass)
        } else {
            Self::fail(fail)
        }
    }
}

/// Why a check could not be judged: the environment failed to answer, not the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// A probe failed in a way the check cannot interpret (display gone, permission denied
    /// on the harness's own files, ...).
    #[error("probe {probe} failed: {error}")]
    Probe {
        /// The probe, briefly.
        probe: String,
        /// The guest's error.
        error: WireError,
    },
    /// The reply had the wrong shape (a bug or a protocol mismatch).
    #[error("unexpected reply to {probe}: {got}")]
    Unexpected {
        /// The probe, briefly.
        probe: String,
        /// What came back.
        got: String,
    },
    /// A peer benchmark's own scoring code could not score (not set up, died, raised).
    #[error("scoring failed: {0}")]
    Scorer(String),
}

/// Unwraps a probe result, turning an error into [`EvalError::Probe`].
pub fn reply<'a>(r: &'a ProbeResult, probe: &str) -> Result<&'a ProbeReply, EvalError> {
    r.as_ref().map_err(|e| EvalError::Probe {
        probe: probe.to_owned(),
        error: e.clone(),
    })
}

/// An [`EvalError::Unexpected`] for a reply of the wrong kind.
pub fn unexpected(probe: &str, got: &ProbeReply) -> EvalError {
    let mut text = format!("{got:?}");
    text.truncate(120);
    EvalError::Unexpected {
        probe: probe.to_owned(),
        got: text,
    }
}

/// What the agent did and said, for checks that read the trajectory instead of a machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentLog {
    /// Events in order.
    pub events: Vec<AgentEvent>,
}

/// One thing the agent did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentEvent {
    /// An input action on an environment (by role).
    Action {
        /// Environment role.
        env: String,
        /// The action.
        action: Action,
    },
    /// The agent submitted an answer.
    Answer {
        /// The answer text.
        text: String,
    },
    /// The agent said it was done.
    Done,
    /// The agent chose to wait (CRAB counts it as its root environment's action).
    Wait,
    /// The agent said the task cannot be done.
    Infeasible {
        /// Why, in its words.
        reason: String,
    },
}

impl AgentLog {
    /// Texts the agent typed, in order, optionally only on one environment.
    pub fn typed<'a>(&'a self, env: Option<&'a str>) -> impl Iterator<Item = &'a str> + 'a {
        self.events.iter().filter_map(move |e| match e {
            AgentEvent::Action {
                env: role,
                action: Action::TypeText { text },
            } if env.is_none_or(|want| want == role) => Some(text.as_str()),
            _ => None,
        })
    }

    /// Whether the agent's last word was that the task cannot be done (OSWorld scores an
    /// infeasible task by exactly this, and a feasible one 0 when it holds).
    pub fn said_infeasible(&self) -> bool {
        matches!(self.events.last(), Some(AgentEvent::Infeasible { .. }))
    }

    /// The last answer the agent submitted.
    pub fn answer(&self) -> Option<&str> {
        self.events.iter().rev().find_map(|e| match e {
            AgentEvent::Answer { text } => Some(text.as_str()),
            AgentEvent::Action { .. }
            | AgentEvent::Done
            | AgentEvent::Wait
            | AgentEvent::Infeasible { .. } => None,
        })
    }
}

/// A built checkpoint function.
pub trait Check: Send + Sync + std::fmt::Debug {
    /// The probes this check needs, always the same list in the same order; empty for
    /// checks that read only the agent's log.
    fn probes(&self) -> Vec<Probe>;

    /// Judges from the replies to [`Check::probes`] (same order) and the agent's log.
    fn judge(&self, replies: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError>;

    /// Whether [`Check::judge`] would pass, without writing its feedback: the evaluator
    /// re-checks failing checkpoints every step and only needs their feedback when it is
    /// shown. Checks that are cheap to decide override it; it must agree with `judge`.
    fn passes(&self, replies: &[&ProbeResult], log: &AgentLog) -> Result<bool, EvalError> {
        self.judge(replies, log).map(|v| v.passed)
    }
}

/// Whether a probe may be read before its checkpoint is ready (see the module doc): only
/// cheap reads without effects. Every probe kind is listed, so a new one needs a decision.
pub fn prefetchable(p: &Probe) -> bool {
    match p {
        Probe::Stat { .. }
        | Probe::ReadFile { .. }
        | Probe::ListDir { .. }
        | Probe::Processes
        | Probe::ActiveWindow
        | Probe::Windows
        | Probe::Clipboard
        | Probe::EnvVar { .. } => true,
        // Runs a program, which may do anything and may take until its timeout.
        Probe::Command { .. } => false,
        // Spawns `gsettings` on the guest.
        Probe::Setting { .. } => false,
        // An AT-SPI walk: from a fraction of a second to seconds.
        Probe::UiTree(_) => false,
        // Starts one of Android's commands, each a Java process on the phone (tens to
        // hundreds of milliseconds).
        Probe::Android(_) => false,
    }
}

/// A probe as a hash key. `Probe` (a wire type) has no `Hash`; this hashes the fields that
/// tell probes apart most often and leaves the rest to `Eq`.
#[derive(Debug, PartialEq, Eq)]
struct Key(Probe);

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(&self.0).hash(h);
        match &self.0 {
            Probe::Stat { path } | Probe::ReadFile { path, .. } | Probe::ListDir { path } => {
                path.hash(h);
            }
            Probe::Command { argv, .. } => argv.hash(h),
            Probe::EnvVar { name } => name.hash(h),
            Probe::Android(q) => q.hash(h),
            Probe::Setting { schema, key } => {
                schema.hash(h);
                key.hash(h);
            }
            Probe::Processes
            | Probe::ActiveWindow
            | Probe::Windows
            | Probe::Clipboard
            | Probe::UiTree(_) => {}
        }
    }
}

/// The multiply-rotate hash of rustc's `FxHasher`: several times faster than SipHash on
/// short keys. Keys here are the evaluator's own (node indices, probes from task files), so
/// SipHash's resistance to chosen collisions buys nothing.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` with [`FxHasher`].
pub(crate) type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A `HashSet` with [`FxHasher`].
pub(crate) type FxHashSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

/// The distinct probes a graph's checks ask of one environment, numbered once when the
/// graph is built: a step then plans its reads by number, so two checks asking for the
/// process list share one probe and planning allocates nothing per check.
#[derive(Debug, Default)]
pub struct ProbeTable {
    ids: FxHashMap<Key, u32>,
    probes: Vec<Probe>,
}

impl ProbeTable {
    /// The number of `p`, adding it if it is new.
    pub fn intern(&mut self, p: &Probe) -> u32 {
        let next = self.probes.len() as u32;
        *self.ids.entry(Key(p.clone())).or_insert_with(|| {
            self.probes.push(p.clone());
            next
        })
    }

    /// Number of distinct probes.
    pub fn len(&self) -> usize {
        self.probes.len()
    }

    /// Whether no check asks for anything.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }
}

/// One step's reads from one environment, with duplicates merged: each probe of the table
/// is sent at most once and every check finds its replies by slot.
#[derive(Debug)]
pub struct Plan<'t> {
    table: &'t ProbeTable,
    /// Slot of each probe number, `u32::MAX` while unplanned.
    slot_of: Vec<u32>,
    /// Probe numbers in slot order.
    order: Vec<u32>,
}

impl<'t> Plan<'t> {
    /// An empty plan over `table`.
    pub fn new(table: &'t ProbeTable) -> Self {
        Self {
            table,
            slot_of: Vec::new(),
            order: Vec::new(),
        }
    }

    /// Adds probes by number and appends the slot of each to `slots`.
    pub fn add(&mut self, ids: &[u32], slots: &mut Vec<u32>) {
        if self.slot_of.is_empty() {
            self.slot_of = vec![u32::MAX; self.table.len()];
        }
        for &id in ids {
            let slot = &mut self.slot_of[id as usize];
            if *slot == u32::MAX {
                *slot = self.order.len() as u32;
                self.order.push(id);
            }
            slots.push(*slot);
        }
    }

    /// Number of distinct probes planned.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether nothing was planned.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The planned probes in slot order, in batches of at most `max` each. A batch equal
    /// to the one `sent` holds for its position is that one again, shared, not copied.
    pub fn batches(&self, max: usize, sent: &mut Sent) -> Vec<Arc<[Probe]>> {
        self.order
            .chunks(max.max(1))
            .enumerate()
            .map(|(k, chunk)| {
                if let Some((ids, probes)) = sent.0.get(k)
                    && ids[..] == *chunk
                {
                    return probes.clone();
                }
                let probes: Arc<[Probe]> = chunk
                    .iter()
                    .map(|&id| self.table.probes[id as usize].clone())
                    .collect();
                let entry = (chunk.to_vec(), probes.clone());
                match sent.0.get_mut(k) {
                    Some(old) => *old = entry,
                    None => sent.0.push(entry),
                }
                probes
            })
            .collect()
    }
}

/// The batches last sent to one environment, by position: a step that asks what the
/// previous one asked (checkpoints that keep failing) sends the same probes without
/// copying them.
#[derive(Debug, Default)]
pub struct Sent(Vec<(Vec<u32>, Arc<[Probe]>)>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_merge_duplicate_probes() {
        let mut table = ProbeTable::default();
        let stat = Probe::Stat { path: "/a".into() };
        let ids_a = [Probe::Processes, stat.clone()].map(|p| table.intern(&p));
        let ids_b = [
            stat.clone(),
            Probe::Clipboard,
            Probe::ReadFile {
                path: "/a".into(),
                max_len: 1,
            },
            Probe::ReadFile {
                path: "/a".into(),
                max_len: 2,
            },
            Probe::Processes,
        ]
        .map(|p| table.intern(&p));
        assert_eq!(table.len(), 5, "the same probe is numbered once");
        assert_eq!(ids_b[0], ids_a[1]);

        // A plan sends what its checks need, each probe once, in the order first asked.
        let mut plan = Plan::new(&table);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        plan.add(&ids_b[..2], &mut b);
        plan.add(&ids_a, &mut a);
        assert_eq!(b, vec![0, 1]);
        assert_eq!(a, vec![2, 0]);
        assert_eq!(plan.len(), 3);
        let mut sent = Sent::default();
        let batches = plan.batches(2, &mut sent);
        assert_eq!(
            batches.iter().map(|b| b.to_vec()).collect::<Vec<_>>(),
            vec![vec![stat, Probe::Clipboard], vec![Probe::Processes]]
        );
        // The same plan next step: the same batches, not copies.
        let again = plan.batches(2, &mut sent);
        assert!(Arc::ptr_eq(&again[0], &batches[0]) && Arc::ptr_eq(&again[1], &batches[1]));
        // Another plan: new batches where they differ.
        let mut other = Plan::new(&table);
        other.add(&ids_b[..2], &mut Vec::new());
        other.add(&[ids_b[2]], &mut Vec::new());
        let changed = other.batches(2, &mut sent);
        assert!(Arc::ptr_eq(&changed[0], &batches[0]));
        assert_eq!(changed[1].len(), 1);
        assert!(!Arc::ptr_eq(&changed[1], &batches[1]));
    }

    #[test]
    fn only_cheap_reads_without_effects_are_prefetchable() {
        assert!(prefetchable(&Probe::Stat { path: "/a".into() }));
        assert!(prefetchable(&Probe::Clipboard));
        assert!(!prefetchable(&Probe::Command {
            argv: vec!["true".into()],
            timeout_ms: 1,
            max_output: 1
        }));
        assert!(!prefetchable(&Probe::UiTree(Default::default())));
        assert!(!prefetchable(&Probe::Setting {
            schema: "a.b".into(),
            key: "c".into()
        }));
    }

    #[test]
    fn the_log_answers_typed_text_and_answers() {
        let log = AgentLog {
            events: vec![
                AgentEvent::Action {
                    env: "desktop".into(),
                    action: Action::TypeText { text: "one".into() },
                },
                AgentEvent::Answer {
                    text: "first".into(),
                },
                AgentEvent::Action {
                    env: "phone".into(),
                    action: Action::TypeText { text: "two".into() },
                },
                AgentEvent::Answer {
                    text: "second".into(),
                },
            ],
        };
        assert_eq!(log.typed(None).collect::<Vec<_>>(), vec!["one", "two"]);
        assert_eq!(log.typed(Some("phone")).collect::<Vec<_>>(), vec!["two"]);
        assert_eq!(log.answer(), Some("second"));
        assert_eq!(AgentLog::default().answer(), None);
    }
}
