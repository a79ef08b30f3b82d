//! The graph evaluator, with CRAB's semantics. A task's checkpoints form a DAG. A node is
//! *ready* when all its predecessors have passed. After every agent action, every ready
//! node is checked; a node that passes is latched (never checked again), and successors it
//! makes ready are checked in the same step (cascade). Failing ready nodes are checked again
//! next step. The task succeeds when every sink has passed.
//!
//! Cost: the probes of every ready node, and speculatively of the successors that could
//! become ready in this step, go out in one `Batch` per environment, so a step is one round
//! trip per environment unless a cascade runs deeper than one level or reaches a node whose
//! probes may not be read ahead (commands, GSettings, the UI tree: see
//! [`prefetchable`](super::prefetchable)), or more than `MAX_BATCH` (1,024) distinct
//! probes are due on one environment: those go out as several batches at once. Host work
//! per step is linear in the nodes checked and read ahead and their edges, whatever the
//! size of the graph.

use super::functions::{BuildError, Library};
use super::{
    AgentLog, Check, EvalError, FxHashSet, Plan, ProbeResult, ProbeTable, Sent, Verdict,
    prefetchable,
};
use crate::env::{ClientError, Environment};
use crate::task::Task;
use petgraph::graph::{DiGraph, NodeIndex};
use pincer_shared::Platform;
use pincer_shared::limits::MAX_BATCH;
use pincer_shared::probe::Probe;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;

/// Where probes are answered: one batch per environment role.
pub trait ProbeSource: Sync {
    /// Runs probes on the environment with this role.
    fn batch(
        &self,
        role: &str,
        probes: Arc<[Probe]>,
    ) -> impl Future<Output = Result<Vec<ProbeResult>, ClientError>> + Send;
}

/// Live environments by role.
#[derive(Debug, Clone, Default)]
pub struct Envs(pub BTreeMap<String, Arc<Environment>>);

impl ProbeSource for Envs {
    async fn batch(
        &self,
        role: &str,
        probes: Arc<[Probe]>,
    ) -> Result<Vec<ProbeResult>, ClientError> {
        let env = self.0.get(role).ok_or_else(|| ClientError::Local {
            env: role.to_owned(),
            message: format!("no environment bound to role '{role}'"),
        })?;
        env.batch(probes).await
    }
}

/// A problem with a task's graph, found before anything runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GraphError {
    /// No checkpoints.
    #[error("the task has no checkpoints")]
    Empty,
    /// A final checkpoint that others come after: it is judged only once the run is over.
    #[error(
        "checkpoint '{node}' is final (judged once the run is over), yet {} come after it: make them final too, or '{node}' not final",
        after.join(", ")
    )]
    FinalNotSink {
        /// The final checkpoint.
        node: String,
        /// The checkpoints after it.
        after: Vec<String>,
    },
    /// Two checkpoints share an id.
    #[error("checkpoint id '{0}' is used twice")]
    DuplicateId(String),
    /// `after` names a checkpoint that does not exist.
    #[error("checkpoint '{node}' comes after '{after}', which does not exist{}", nearest.as_ref().map(|n| format!(" (did you mean '{n}'?)")).unwrap_or_default())]
    UnknownAfter {
        /// The checkpoint.
        node: String,
        /// The missing predecessor.
        after: String,
        /// The closest existing id.
        nearest: Option<String>,
    },
    /// The graph has a cycle.
    #[error("the checkpoints {} form a cycle", nodes.join(" -> "))]
    Cycle {
        /// The checkpoints on the cycle in edge order, the first repeated at the end.
        nodes: Vec<String>,
    },
    /// A checkpoint reads an environment role the task does not declare.
    #[error("checkpoint '{node}' reads environment '{role}', but the task declares only {}", known.join(", "))]
    UnknownRole {
        /// The checkpoint.
        node: String,
        /// The role used.
        role: String,
        /// Roles declared.
        known: Vec<String>,
    },
    /// An argument names an environment role the task does not declare (the `env` of
    /// `typed_contains`).
    #[error("checkpoint '{node}': {function} names environment '{role}' in its `env` argument, but the task declares only {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownArgRole {
        /// The checkpoint.
        node: String,
        /// The function whose argument names it.
        function: String,
        /// The role named.
        role: String,
        /// Roles declared.
        known: Vec<String>,
    },
    /// A function that reads an environment has none.
    #[error("checkpoint '{node}' uses {function}, which reads an environment: give it an `env`")]
    MissingEnv {
        /// The checkpoint.
        node: String,
        /// The function.
        function: String,
    },
    /// A function cannot run on the role's platform.
    #[error("checkpoint '{node}' uses {function} on '{role}' ({platform}), but {function} works on {}", supported.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    WrongPlatform {
        /// The checkpoint.
        node: String,
        /// The function.
        function: String,
        /// The role.
        role: String,
        /// Its platform.
        platform: Platform,
        /// Platforms the function supports.
        supported: Vec<Platform>,
    },
    /// The function is unknown or its arguments are bad.
    #[error("checkpoint '{node}': {error}")]
    Build {
        /// The checkpoint.
        node: String,
        /// What was wrong.
        error: BuildError,
    },
    /// A setup or teardown step is invalid or names an unknown role.
    #[error("{phase} step {index} on '{role}': {message}")]
    BadStep {
        /// "setup" or "teardown".
        phase: &'static str,
        /// The role.
        role: String,
        /// Position in the list.
        index: usize,
        /// What was wrong.
        message: String,
    },
}

/// Everything wrong with a task, listed together so an author fixes it in one go.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task '{task}' is invalid:\n{}", errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
pub struct ValidationErrors {
    /// The task id.
    pub task: String,
    /// The problems.
    pub errors: Vec<GraphError>,
}

/// Why a task cannot run: its checkpoint graph, its oracle, or both.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.lines().join("\n"))]
pub struct TaskInvalid {
    /// What is wrong with its checkpoints.
    pub graph: Option<ValidationErrors>,
    /// What is wrong with its oracle.
    pub oracle: Option<(String, crate::task::oracle::OracleError)>,
}

impl TaskInvalid {
    fn lines(&self) -> Vec<String> {
        let graph = self.graph.iter().map(ToString::to_string);
        let oracle = self
            .oracle
            .iter()
            .map(|(task, e)| format!("task '{task}': {e}"));
        graph.chain(oracle).collect()
    }
}

#[derive(Debug)]
struct Node {
    id: String,
    /// The environment read, as an index into [`Graph::roles`].
    role: Option<usize>,
    function: String,
    check: Box<dyn Check>,
    /// The numbers of `check.probes()` in its role's [`ProbeTable`], asked once: the list
    /// never changes.
    probe_ids: Vec<u32>,
    /// Whether every probe may be read before the node is ready.
    prefetch: bool,
    preds: Vec<usize>,
    succs: Vec<usize>,
    /// Judged once, on the final state ([`Evaluator::finish`]), never after a step.
    final_only: bool,
}

/// A validated, built checkpoint graph (immutable; shareable between runs).
#[derive(Debug)]
pub struct Graph {
    nodes: Vec<Node>,
    sinks: Vec<usize>,
    /// The task's environment roles, sorted.
    roles: Vec<String>,
    /// The distinct probes of each role's checks, by role index.
    tables: Vec<ProbeTable>,
}

/// How far one checkpoint got.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeProgress {
    /// Checkpoint id.
    pub id: String,
    /// The step at which it passed (0: before the first action).
    pub passed_at: Option<u32>,
    /// When it passed, in milliseconds since the evaluation began (for people working on
    /// a task, whose progress is not counted in actions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_ms: Option<u64>,
    /// How many times it was checked.
    pub checks: u32,
    /// The latest verdict's feedback.
    pub feedback: Option<String>,
    /// For a checkpoint that passed: whether it still held when the task run ended
    /// (`None`: not checked at the end, e.g. after an environment error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at_end: Option<bool>,
    /// The grade of a checkpoint whose check grades (a peer's metric), between 0 and 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// Whether it is judged only on the final state.
    #[serde(rename = "final", default, skip_serializing_if = "std::ops::Not::not")]
    pub final_only: bool,
}

/// What one evaluation step did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReport {
    /// Checkpoints that passed in this step, in the order they passed.
    pub passed: Vec<String>,
    /// Checkpoints checked in this step.
    pub checked: usize,
    /// Round trips made (batches per environment, summed).
    pub round_trips: u32,
}

/// Why a step could not be evaluated.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// An environment did not answer.
    #[error("environment '{role}' failed: {error}")]
    Environment {
        /// The role.
        role: String,
        /// What failed.
        error: ClientError,
    },
    /// A check could not interpret what it read.
    #[error("checkpoint '{node}': {error}")]
    Evaluator {
        /// The checkpoint.
        node: String,
        /// What failed.
        error: EvalError,
    },
}

impl Graph {
    /// Validates a whole task as every command takes it, its checkpoint graph and its
    /// oracle, and builds its checks: the one check `pincer task check` and every run make.
    pub fn check_task(task: &Task, lib: &Library) -> Result<Self, TaskInvalid> {
        let graph = Self::build(task, lib);
        let oracle = task
            .oracle
            .as_deref()
            .map_or(Ok(()), |steps| {
                let ids: Vec<&str> = task.checkpoints.iter().map(|c| c.id.as_str()).collect();
                crate::task::oracle::check(steps)
                    .and_then(|()| crate::task::oracle::check_checkpoints(steps, &ids))
            })
            .err()
            .map(|e| (task.id.clone(), e));
        match (graph, oracle) {
            (Ok(g), None) => Ok(g),
            (graph, oracle) => Err(TaskInvalid {
                graph: graph.err(),
                oracle,
            }),
        }
    }

    /// Validates a task's checkpoint graph and builds its checks.
    pub fn build(task: &Task, lib: &Library) -> Result<Self, ValidationErrors> {
        let mut errors = Vec::new();
        if task.checkpoints.is_empty() {
            errors.push(GraphError::Empty);
        }
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, c) in task.checkpoints.iter().enumerate() {
            if index.insert(&c.id, i).is_some() {
                errors.push(GraphError::DuplicateId(c.id.clone()));
            }
        }
        let roles: Vec<String> = task.envs.keys().cloned().collect();
        let mut nodes = Vec::new();
        let mut tables: Vec<ProbeTable> = roles.iter().map(|_| ProbeTable::default()).collect();
        // Predecessors of every checkpoint (built or not), for cycle detection.
        let mut all_preds = Vec::with_capacity(task.checkpoints.len());
        for c in &task.checkpoints {
            let mut preds = Vec::new();
            for a in &c.after {
                match index.get(a.as_str()) {
                    Some(&p) => preds.push(p),
                    None => errors.push(GraphError::UnknownAfter {
                        node: c.id.clone(),
                        after: a.clone(),
                        nearest: nearest(a, task.checkpoints.iter().map(|c| c.id.as_str())),
                    }),
                }
            }
            if let Some(role) = &c.env
                && !task.envs.contains_key(role)
            {
                errors.push(GraphError::UnknownRole {
                    node: c.id.clone(),
                    role: role.clone(),
                    known: roles.clone(),
                });
            }
            all_preds.push(preds.clone());
            let check = match lib.build(&c.check, &c.args) {
                Ok(check) => Some(check),
                Err(error) => {
                    errors.push(GraphError::Build {
                        node: c.id.clone(),
                        error,
                    });
                    None
                }
            };
            if check.is_some() {
                for (function, role) in lib.roles_in_args(&c.check, &c.args) {
                    if !task.envs.contains_key(&role) {
                        errors.push(GraphError::UnknownArgRole {
                            node: c.id.clone(),
                            function,
                            role,
                            known: roles.clone(),
                        });
                    }
                }
            }
            if check.is_some() && lib.reads_env(&c.check, &c.args) {
                match c
                    .env
                    .as_ref()
                    .and_then(|r| task.envs.get(r).map(|n| (r, n.platform)))
                {
                    None if c.env.is_none() => errors.push(GraphError::MissingEnv {
                        node: c.id.clone(),
                        function: c.check.clone(),
                    }),
                    Some((role, platform)) => {
                        let supported = lib.platforms(&c.check, &c.args).unwrap_or_default();
                        if !supported.contains(&platform) {
                            errors.push(GraphError::WrongPlatform {
                                node: c.id.clone(),
                                function: c.check.clone(),
                                role: role.clone(),
                                platform,
                                supported,
                            });
                        }
                    }
                    None => {}
                }
            }
            if let Some(check) = check {
                let probes = check.probes();
                let role = c
                    .env
                    .as_ref()
                    .and_then(|r| roles.iter().position(|k| k == r));
                let probe_ids = match role {
                    Some(r) => probes.iter().map(|p| tables[r].intern(p)).collect(),
                    None => Vec::new(),
                };
                nodes.push(Node {
                    id: c.id.clone(),
                    role,
                    function: c.check.clone(),
                    prefetch: probes.iter().all(prefetchable),
                    probe_ids,
                    check,
                    preds,
                    succs: Vec::new(),
                    final_only: c.final_only,
                });
            }
        }
        for (phase, map) in [
            ("setup", &task.setup),
            ("finalize", &task.finalize),
            ("teardown", &task.teardown),
        ] {
            for (role, steps) in map {
                for (i, s) in steps.iter().enumerate() {
                    let message = if !task.envs.contains_key(role) {
                        Some(format!(
                            "the task declares no environment '{role}' (declared: {})",
                            roles.join(", ")
                        ))
                    } else {
                        s.validate().err()
                    };
                    if let Some(message) = message {
                        errors.push(GraphError::BadStep {
                            phase,
                            role: role.clone(),
                            index: i,
                            message,
                        });
                    }
                }
            }
        }
        let ids: Vec<&str> = task.checkpoints.iter().map(|c| c.id.as_str()).collect();
        errors.extend(
            find_cycles(&ids, &all_preds)
                .into_iter()
                .map(|nodes| GraphError::Cycle { nodes }),
        );
        if !errors.is_empty() {
            return Err(ValidationErrors {
                task: task.id.clone(),
                errors,
            });
        }
        for i in 0..nodes.len() {
            for p in nodes[i].preds.clone() {
                nodes[p].succs.push(i);
            }
        }
        for n in nodes.iter().filter(|n| n.final_only) {
            let after: Vec<String> = n
                .succs
                .iter()
                .filter(|&&s| !nodes[s].final_only)
                .map(|&s| nodes[s].id.clone())
                .collect();
            if !after.is_empty() {
                errors.push(GraphError::FinalNotSink {
                    node: n.id.clone(),
                    after,
                });
            }
        }
        if !errors.is_empty() {
            return Err(ValidationErrors {
                task: task.id.clone(),
                errors,
            });
        }
        let sinks = (0..nodes.len())
            .filter(|&i| nodes[i].succs.is_empty())
            .collect();
        Ok(Self {
            nodes,
            sinks,
            roles,
            tables,
        })
    }

    /// Number of checkpoints.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no checkpoints (never true for a built graph).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Checkpoint ids in task order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|n| n.id.as_str())
    }

    /// Checks every checkpoint now, ready or not (for task authors: `pincer task check`).
    /// One round trip per environment.
    pub async fn check_all<S: ProbeSource>(
        &self,
        src: &S,
        log: &AgentLog,
    ) -> Result<Vec<(String, Result<Verdict, EvalError>)>, StepError> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let mut reads = Reads::new(self.nodes.len());
        let mut sent: Vec<Sent> = self.roles.iter().map(|_| Sent::default()).collect();
        self.fetch(&all, src, &mut reads, &mut sent).await?;
        let mut buf = Vec::new();
        Ok(all
            .iter()
            .map(|&i| {
                let n = &self.nodes[i];
                reads.of(i, &mut buf);
                (n.id.clone(), n.check.judge(&buf, log))
            })
            .collect())
    }

    /// Reads the probes of `nodes` into `reads`, one batch per environment, concurrently;
    /// returns the number of batches sent.
    async fn fetch<S: ProbeSource>(
        &self,
        nodes: &[usize],
        src: &S,
        reads: &mut Reads,
        sent: &mut [Sent],
    ) -> Result<u32, StepError> {
        // Per role index: the merged probes, and each node's slots in them as
        // (node, start, end) in `reads.slots`.
        let mut plans: Vec<(Plan, Vec<NodeSlots>)> = self
            .tables
            .iter()
            .map(|t| (Plan::new(t), Vec::new()))
            .collect();
        reads.slots.reserve(nodes.len());
        for &i in nodes {
            let n = &self.nodes[i];
            match n.role {
                Some(role) if !n.probe_ids.is_empty() => {
                    let (plan, at) = &mut plans[role];
                    let start = reads.slots.len() as u32;
                    plan.add(&n.probe_ids, &mut reads.slots);
                    at.push((i, start, reads.slots.len() as u32));
                }
                _ => reads.spans[i] = Span::EMPTY,
            }
        }
        // A guest takes at most MAX_BATCH probes per batch: a bigger plan goes out as
        // several batches, all at once.
        let mut owners = Vec::new();
        let mut batches = Vec::new();
        let mut sizes = Vec::new();
        for ((role, (plan, at)), sent) in self.roles.iter().zip(&plans).zip(sent) {
            let before = batches.len();
            for chunk in plan.batches(MAX_BATCH, sent) {
                sizes.push(chunk.len());
                batches.push(src.batch(role, chunk));
            }
            if batches.len() > before {
                owners.push((role, at, batches.len() - before));
            }
        }
        let sent = batches.len() as u32;
        let mut results = futures::future::join_all(batches).await.into_iter();
        // Batches already taken out of `results`, to find each one's size.
        let mut done = 0;
        for (role, at, chunks) in owners {
            // Each batch's replies stay where they arrived: slot `s` of the plan is reply
            // `s % MAX_BATCH` of its `s / MAX_BATCH`th batch.
            let first = reads.batches.len() as u32;
            for (k, result) in results.by_ref().take(chunks).enumerate() {
                let failed = |error| StepError::Environment {
                    role: role.to_owned(),
                    error,
                };
                let replies = result.map_err(failed)?;
                let asked = sizes[done + k];
                if replies.len() != asked {
                    return Err(failed(ClientError::Local {
                        env: role.to_owned(),
                        message: format!("{asked} probes got {} replies", replies.len()),
                    }));
                }
                reads.batches.push(replies);
            }
            done += chunks;
            for &(i, start, end) in at {
                reads.spans[i] = Span {
                    batch: first,
                    start,
                    end,
                };
            }
        }
        Ok(sent)
    }
}

/// A node and the range of its slots in [`Reads::slots`], while a fetch is planned.
type NodeSlots = (usize, u32, u32);

/// Where a node's replies are: the slots `slots[start..end]` of the plan whose first batch
/// is `batches[batch]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    batch: u32,
    start: u32,
    end: u32,
}

impl Span {
    /// Not read (yet).
    const UNREAD: Self = Self {
        batch: u32::MAX,
        start: 0,
        end: 0,
    };
    /// Read, with no probes (agent-log checks).
    const EMPTY: Self = Self {
        batch: 0,
        start: 0,
        end: 0,
    };
}

/// Probe replies read for nodes, kept where they arrived.
#[derive(Debug, Default)]
struct Reads {
    batches: Vec<Vec<ProbeResult>>,
    slots: Vec<u32>,
    /// By node.
    spans: Vec<Span>,
}

impl Reads {
    /// Nothing read yet for a graph of `nodes` checkpoints.
    fn new(nodes: usize) -> Self {
        Self {
            batches: Vec::new(),
            slots: Vec::new(),
            spans: vec![Span::UNREAD; nodes],
        }
    }

    /// Nothing read, for a graph of `nodes` checkpoints, keeping the buffers.
    fn reset(&mut self, nodes: usize) {
        self.batches.clear();
        self.slots.clear();
        self.spans.clear();
        self.spans.resize(nodes, Span::UNREAD);
    }

    /// Whether the node's probes were read.
    fn has(&self, node: usize) -> bool {
        self.spans[node] != Span::UNREAD
    }

    /// The node's replies, in the order of its probes (empty for nodes without probes),
    /// in `buf` (cleared first, reused so that judging a node allocates nothing here).
    fn of<'a>(&'a self, node: usize, buf: &mut Vec<&'a ProbeResult>) {
        let Span { batch, start, end } = self.spans[node];
        buf.clear();
        buf.extend(self.slots[start as usize..end as usize].iter().map(|&s| {
            let (b, at) = (s as usize / MAX_BATCH, s as usize % MAX_BATCH);
            &self.batches[batch as usize + b][at]
        }));
    }
}

/// The closest of `candidates` to `name`, if close.
fn nearest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<String> {
    candidates
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(s, _)| *s > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.to_owned())
}

/// Every cycle of the graph given by `preds` (indices into `ids`), one per strongly
/// connected component, each as a path of ids in edge order from its smallest id back to
/// it: `a -> c -> b -> a` when `a` comes before `c`, `c` before `b` and `b` before `a`.
fn find_cycles(ids: &[&str], preds: &[Vec<usize>]) -> Vec<Vec<String>> {
    let mut g: DiGraph<usize, ()> = DiGraph::new();
    let ix: Vec<NodeIndex> = (0..ids.len()).map(|i| g.add_node(i)).collect();
    for (i, ps) in preds.iter().enumerate() {
        for &p in ps {
            g.add_edge(ix[p], ix[i], ());
        }
    }
    if petgraph::algo::toposort(&g, None).is_ok() {
        return Vec::new();
    }
    let mut cycles: Vec<Vec<String>> = petgraph::algo::tarjan_scc(&g)
        .into_iter()
        .filter(|c| c.len() > 1 || g.contains_edge(c[0], c[0]))
        .map(|scc| {
            let start = *scc
                .iter()
                .min_by_key(|&&n| (ids[g[n]], g[n]))
                .unwrap_or(&scc[0]);
            // Breadth-first inside the component: the shortest way from the start back
            // to it.
            let inside: HashSet<NodeIndex> = scc.iter().copied().collect();
            let mut came_from: HashMap<NodeIndex, NodeIndex> = HashMap::new();
            let mut queue = VecDeque::from([start]);
            let mut last = start;
            'search: while let Some(n) = queue.pop_front() {
                for m in g.neighbors(n) {
                    if m == start {
                        last = n;
                        break 'search;
                    }
                    if inside.contains(&m) && !came_from.contains_key(&m) {
                        came_from.insert(m, n);
                        queue.push_back(m);
                    }
                }
            }
            let mut path = vec![start];
            let mut n = last;
            while n != start {
                path.push(n);
                n = came_from[&n];
            }
            path[1..].reverse();
            path.push(start);
            path.iter().map(|&n| ids[g[n]].to_owned()).collect()
        })
        .collect();
    cycles.sort();
    cycles
}

/// One run's evaluation state over a shared [`Graph`].
#[derive(Debug)]
pub struct Evaluator {
    graph: Arc<Graph>,
    passed_at: Vec<Option<u32>>,
    passed_ms: Vec<Option<u64>>,
    started: std::time::Instant,
    remaining: Vec<usize>,
    checks: Vec<u32>,
    feedback: Vec<Option<String>>,
    /// For passed checkpoints, whether they still held at the end ([`Evaluator::finish`]).
    held: Vec<Option<bool>>,
    /// The grades of checkpoints whose checks grade.
    scores: Vec<Option<f64>>,
    /// The last step evaluated (0: none yet): when final checkpoints pass.
    last_step: u32,
    ready: BTreeSet<usize>,
    /// Whether steps judge the checkpoints that fail too, writing their feedback at once
    /// (`--feedback step`; otherwise only [`Self::finish`] does).
    explain: bool,
    /// The batches last sent, by role.
    sent: Vec<Sent>,
    /// Buffers for the replies of a step, kept between steps.
    reads: Reads,
}

impl Evaluator {
    /// A fresh evaluation (nothing passed).
    pub fn new(graph: Arc<Graph>) -> Self {
        let remaining: Vec<usize> = graph.nodes.iter().map(|n| n.preds.len()).collect();
        // Final checkpoints are never ready during the run: `finish` judges them.
        let ready = (0..graph.nodes.len())
            .filter(|&i| remaining[i] == 0 && !graph.nodes[i].final_only)
            .collect();
        Self {
            passed_at: vec![None; graph.nodes.len()],
            passed_ms: vec![None; graph.nodes.len()],
            started: std::time::Instant::now(),
            checks: vec![0; graph.nodes.len()],
            feedback: vec![None; graph.nodes.len()],
            held: vec![None; graph.nodes.len()],
            scores: vec![None; graph.nodes.len()],
            last_step: 0,
            remaining,
            ready,
            explain: false,
            sent: graph.roles.iter().map(|_| Sent::default()).collect(),
            reads: Reads::new(graph.nodes.len()),
            graph,
        }
    }

    /// Makes every step judge the checkpoints that fail as well, so each ready checkpoint's
    /// feedback says what the latest step saw (for agents given feedback at every step).
    pub fn explain_every_step(&mut self) {
        self.explain = true;
    }

    /// The check before the first action: which ready checkpoints already pass. Any that
    /// do mean the setup is broken (the task would score without the agent). Nothing is
    /// latched.
    pub async fn initial_check<S: ProbeSource>(
        &self,
        src: &S,
        log: &AgentLog,
    ) -> Result<Vec<(String, Verdict)>, StepError> {
        let ready: Vec<usize> = self.ready.iter().copied().collect();
        let mut reads = Reads::new(self.graph.nodes.len());
        let mut sent: Vec<Sent> = self.graph.roles.iter().map(|_| Sent::default()).collect();
        self.graph.fetch(&ready, src, &mut reads, &mut sent).await?;
        let mut passing = Vec::new();
        let mut buf = Vec::new();
        for i in ready {
            let n = &self.graph.nodes[i];
            reads.of(i, &mut buf);
            let v = n
                .check
                .judge(&buf, log)
                .map_err(|error| StepError::Evaluator {
                    node: n.id.clone(),
                    error,
                })?;
            if v.passed {
                passing.push((n.id.clone(), v));
            }
        }
        Ok(passing)
    }

    /// Evaluates after an action (`step` counts actions from 1).
    pub async fn step<S: ProbeSource>(
        &mut self,
        step: u32,
        src: &S,
        log: &AgentLog,
    ) -> Result<StepReport, StepError> {
        let mut report = StepReport::default();
        self.last_step = self.last_step.max(step);
        let mut frontier: Vec<usize> = self.ready.iter().copied().collect();
        // The previous step's buffers, emptied: a step allocates nothing per checkpoint.
        let mut reads = std::mem::take(&mut self.reads);
        reads.reset(self.graph.nodes.len());
        while !frontier.is_empty() {
            // The frontier and the look-ahead are disjoint: a successor of a frontier node
            // waits for it, so it is not ready yet.
            let need: Vec<usize> = frontier
                .iter()
                .copied()
                .chain(self.lookahead(&frontier))
                .filter(|&i| !reads.has(i))
                .collect();
            if !need.is_empty() {
                report.round_trips += self
                    .graph
                    .fetch(&need, src, &mut reads, &mut self.sent)
                    .await?;
            }
            let mut newly = Vec::new();
            let mut buf = Vec::new();
            for &i in &frontier {
                let n = &self.graph.nodes[i];
                reads.of(i, &mut buf);
                let failed = |error| StepError::Evaluator {
                    node: n.id.clone(),
                    error,
                };
                // Feedback is written only when a verdict changes to a pass (failing ones
                // get theirs from `finish` when they are shown), unless every step explains.
                let passed = if self.explain {
                    let v = n.check.judge(&buf, log).map_err(failed)?;
                    self.scores[i] = v.score;
                    self.feedback[i] = Some(v.feedback);
                    v.passed
                } else {
                    n.check.passes(&buf, log).map_err(failed)?
                };
                self.checks[i] += 1;
                report.checked += 1;
                if passed {
                    if !self.explain {
                        let v = n.check.judge(&buf, log).map_err(failed)?;
                        self.scores[i] = v.score;
                        self.feedback[i] = Some(v.feedback);
                    }
                    self.passed_at[i] = Some(step);
                    self.passed_ms[i] = Some(self.started.elapsed().as_millis() as u64);
                    self.ready.remove(&i);
                    report.passed.push(n.id.clone());
                    newly.push(i);
                }
            }
            let mut next = BTreeSet::new();
            for i in newly {
                for &s in &self.graph.nodes[i].succs {
                    self.remaining[s] -= 1;
                    if self.remaining[s] == 0 && !self.graph.nodes[s].final_only {
                        self.ready.insert(s);
                        next.insert(s);
                    }
                }
            }
            frontier = next.into_iter().collect();
        }
        // The replies go now; the buffers stay for the next step.
        reads.batches.clear();
        self.reads = reads;
        Ok(report)
    }

    /// The check at the end of a task run, in one round trip per environment. Every
    /// checkpoint that passed is judged once more: whether it still holds decides success
    /// on the final state ([`Self::undone_sinks`], [`Self::final_counts`]) while the
    /// latched passes stay for the completion ratio. The checkpoints that are ready and have
    /// not passed are judged with feedback, so that the record says what each saw at the
    /// end (steps only decide whether they pass). Final checkpoints whose predecessors
    /// passed are judged here for the first and only time; one that passes passes at the
    /// last step, and its grade is the task's score ([`Self::score`]).
    pub async fn finish<S: ProbeSource>(
        &mut self,
        src: &S,
        log: &AgentLog,
    ) -> Result<(), StepError> {
        let nodes = &self.graph.nodes;
        let passed = (0..nodes.len()).filter(|&i| self.passed_at[i].is_some());
        let finals = (0..nodes.len()).filter(|&i| {
            nodes[i].final_only
                && self.passed_at[i].is_none()
                && nodes[i].preds.iter().all(|&p| self.passed_at[p].is_some())
        });
        let judged: Vec<usize> = passed
            .chain(self.ready.iter().copied())
            .chain(finals)
            .collect();
        if judged.is_empty() {
            return Ok(());
        }
        let mut reads = Reads::new(self.graph.nodes.len());
        self.graph
            .fetch(&judged, src, &mut reads, &mut self.sent)
            .await?;
        let mut buf = Vec::new();
        for i in judged {
            reads.of(i, &mut buf);
            let n = &self.graph.nodes[i];
            let verdict = n.check.judge(&buf, log);
            if n.final_only && self.passed_at[i].is_none() {
                let v = verdict.map_err(|error| StepError::Evaluator {
                    node: n.id.clone(),
                    error,
                })?;
                self.checks[i] += 1;
                self.scores[i] = Some(v.grade());
                if v.passed {
                    self.passed_at[i] = Some(self.last_step);
                    self.passed_ms[i] = Some(self.started.elapsed().as_millis() as u64);
                    self.held[i] = Some(true);
                }
                self.feedback[i] = Some(v.feedback);
                continue;
            }
            match (self.passed_at[i], verdict) {
                (Some(_), Ok(v)) if v.passed => self.held[i] = Some(true),
                (Some(step), Ok(v)) => {
                    self.held[i] = Some(false);
                    self.feedback[i] = Some(format!(
                        "passed at step {step} but no longer holds: {}",
                        v.feedback
                    ));
                }
                // A checkpoint that cannot be judged at the end is an evaluator failure
                // like any other.
                (Some(_), Err(error)) => {
                    return Err(StepError::Evaluator {
                        node: n.id.clone(),
                        error,
                    });
                }
                (None, v) => {
                    self.feedback[i] = Some(match v {
                        Ok(v) => v.feedback,
                        Err(e) => format!("not judged: {e}"),
                    });
                }
            }
        }
        Ok(())
    }

    /// The sinks that passed but no longer held at the end (after [`Self::finish`]).
    pub fn undone_sinks(&self) -> Vec<&str> {
        self.graph
            .sinks
            .iter()
            .filter(|&&s| self.held[s] == Some(false))
            .map(|&s| self.graph.nodes[s].id.as_str())
            .collect()
    }

    /// Checkpoints that passed and still held at the end, and all checkpoints; `None` until
    /// [`Self::finish`] has checked every passed one.
    pub fn final_counts(&self) -> Option<(usize, usize)> {
        let passed = || (0..self.graph.nodes.len()).filter(|&i| self.passed_at[i].is_some());
        if passed().any(|i| self.held[i].is_none()) {
            return None;
        }
        let held = passed().filter(|&i| self.held[i] == Some(true)).count();
        Some((held, self.graph.nodes.len()))
    }

    /// Successors that would become ready if every node of `frontier` passed and whose
    /// probes may be read ahead. Each successor is looked at once.
    fn lookahead(&self, frontier: &[usize]) -> Vec<usize> {
        let nodes = &self.graph.nodes;
        let mut seen: FxHashSet<usize> = FxHashSet::default();
        let candidates: Vec<usize> = frontier
            .iter()
            .flat_map(|&i| &nodes[i].succs)
            .copied()
            .filter(|&s| nodes[s].prefetch && self.passed_at[s].is_none() && seen.insert(s))
            .collect();
        if candidates.is_empty() {
            return candidates;
        }
        let in_frontier: FxHashSet<usize> = frontier.iter().copied().collect();
        candidates
            .into_iter()
            .filter(|&s| {
                nodes[s]
                    .preds
                    .iter()
                    .all(|p| self.passed_at[*p].is_some() || in_frontier.contains(p))
            })
            .collect()
    }

    /// The task's score on its final state: the mean grade of its final checkpoints (a
    /// final checkpoint not judged counts 0); `None` for a task without final checkpoints.
    pub fn score(&self) -> Option<f64> {
        let finals: Vec<usize> = (0..self.graph.nodes.len())
            .filter(|&i| self.graph.nodes[i].final_only)
            .collect();
        if finals.is_empty() {
            return None;
        }
        let sum: f64 = finals.iter().map(|&i| self.scores[i].unwrap_or(0.0)).sum();
        Some(sum / finals.len() as f64)
    }

    /// Whether the checkpoint `id` is a sink (nothing comes after it).
    pub fn is_sink(&self, id: &str) -> bool {
        self.graph
            .sinks
            .iter()
            .any(|&s| self.graph.nodes[s].id == id)
    }

    /// Whether every sink has passed.
    pub fn is_success(&self) -> bool {
        self.graph
            .sinks
            .iter()
            .all(|&s| self.passed_at[s].is_some())
    }

    /// Passed checkpoints over all checkpoints.
    pub fn completion_ratio(&self) -> f64 {
        let passed = self.passed_at.iter().filter(|p| p.is_some()).count();
        passed as f64 / self.graph.nodes.len().max(1) as f64
    }

    /// Passed and total checkpoints.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.passed_at.iter().filter(|p| p.is_some()).count(),
            self.graph.nodes.len(),
        )
    }

    /// Per-checkpoint progress so far.
    pub fn progress(&self) -> Vec<NodeProgress> {
        self.graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeProgress {
                id: n.id.clone(),
                passed_at: self.passed_at[i],
                passed_ms: self.passed_ms[i],
                checks: self.checks[i],
                feedback: self.feedback[i].clone(),
                held_at_end: self.held[i],
                score: self.scores[i],
                final_only: n.final_only,
            })
            .collect()
    }

    /// Ids of the checkpoints ready now (for agents' language feedback).
    pub fn ready_ids(&self) -> Vec<&str> {
        self.ready
            .iter()
            .map(|&i| self.graph.nodes[i].id.as_str())
            .collect()
    }

    /// The function name of a checkpoint.
    pub fn function_of(&self, id: &str) -> Option<&str> {
        self.graph
            .nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.function.as_str())
    }
}

#[cfg(test)]
#[path = "graph_tests.rs"]
mod tests;
