//! Host CPU of the graph evaluator per step, for two shapes of a synthetic 10,000-node
//! graph over two environments:
//!
//! - *chains*: 100 chains of 100 nodes, every 10th node also waiting for its neighbour
//!   chain; each step makes the next node of every chain true, so 100 ready nodes are
//!   checked and pass and their 100 successors are read ahead;
//! - *flat*: 10,000 sources, all ready at once; idle steps re-check all of them, and in the
//!   last step all of them pass.
//!
//! Probes are answered from memory, so only host work is timed; the stand-in's own time
//! (building replies) is measured separately and reported beside it. Times are the
//! thread's CPU time, so other processes on a busy machine do not inflate them.
//!
//! Run: `cargo bench -p pincer --bench evaluator`.

use pincer::env::ClientError;
use pincer::eval::functions::Library;
use pincer::eval::graph::{Evaluator, Graph, ProbeSource};
use pincer::eval::{AgentLog, ProbeResult};
use pincer::task::Task;
use pincer_shared::probe::{FileContent, FileKind, FileStat, Probe, ProbeReply};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// CPU time this thread has used.
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Steps timed per measurement.
const STEPS: usize = 100;

/// Answers file probes from a set of existing paths, timing itself.
#[derive(Default)]
struct Memory {
    files: Mutex<HashSet<String>>,
    spent: Mutex<Duration>,
}

impl Memory {
    fn set(&self, paths: impl IntoIterator<Item = String>) {
        self.files.lock().unwrap().extend(paths);
    }

    /// Time spent answering since the last call.
    fn take_spent(&self) -> Duration {
        std::mem::take(&mut *self.spent.lock().unwrap())
    }
}

impl ProbeSource for Memory {
    async fn batch(
        &self,
        _role: &str,
        probes: Arc<[Probe]>,
    ) -> Result<Vec<ProbeResult>, ClientError> {
        let t = cpu_now();
        let files = self.files.lock().unwrap();
        // As a guest does: the reply names the path asked, in its own string.
        let replies = probes
            .iter()
            .cloned()
            .map(|p| match p {
                Probe::Stat { path } => Ok(ProbeReply::Stat(FileStat {
                    exists: files.contains(&path),
                    kind: files.contains(&path).then_some(FileKind::File),
                    target: None,
                    size: 1,
                    mode: 0o644,
                    modified_ms: 0,
                    path,
                })),
                Probe::ReadFile { path, .. } => {
                    Ok(ProbeReply::File(files.contains(&path).then(|| {
                        FileContent {
                            path,
                            bytes: Vec::new(),
                            total_size: 1,
                        }
                    })))
                }
                other => panic!("unexpected probe {other:?}"),
            })
            .collect();
        *self.spent.lock().unwrap() += cpu_now() - t;
        Ok(replies)
    }
}

fn node(id: &str, role: &str, after: Vec<String>) -> serde_json::Value {
    serde_json::json!({
        "id": id, "env": role, "check": "file_exists", "args": {"path": format!("/f/{id}")},
        "after": after
    })
}

fn task(nodes: Vec<serde_json::Value>) -> Task {
    serde_json::from_value(serde_json::json!({
        "id": "synthetic", "instruction": "x",
        "envs": {"desktop": {"platform": "linux"}, "desktop2": {"platform": "linux"}},
        "checkpoints": nodes
    }))
    .unwrap()
}

/// 100 chains of n/100 nodes; every 10th node also waits for its neighbour chain.
fn chains(n: usize) -> Task {
    let per = n / 100;
    let mut nodes = Vec::with_capacity(n);
    for c in 0..100 {
        for k in 0..per {
            let mut after = Vec::new();
            if k > 0 {
                after.push(format!("c{c}n{}", k - 1));
                if k % 10 == 0 && c > 0 {
                    after.push(format!("c{}n{}", c - 1, k - 1));
                }
            }
            let role = if c % 2 == 0 { "desktop" } else { "desktop2" };
            nodes.push(node(&format!("c{c}n{k}"), role, after));
        }
    }
    task(nodes)
}

/// n sources, half on each environment.
fn flat(n: usize) -> Task {
    task(
        (0..n)
            .map(|i| {
                let role = if i % 2 == 0 { "desktop" } else { "desktop2" };
                node(&format!("f{i}"), role, Vec::new())
            })
            .collect(),
    )
}

/// Timings of steps: evaluator total and the stand-in's part.
#[derive(Default)]
struct Times {
    total: Vec<Duration>,
    source: Vec<Duration>,
}

impl Times {
    fn push(&mut self, total: Duration, source: Duration) {
        self.total.push(total);
        self.source.push(source);
    }

    fn line(&mut self, what: &str) {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let host: Vec<Duration> = self
            .total
            .iter()
            .zip(&self.source)
            .map(|(t, s)| t.saturating_sub(*s))
            .collect();
        let q = |v: &[Duration], p: f64| {
            let mut v = v.to_vec();
            v.sort();
            ms(v[((v.len() - 1) as f64 * p).round() as usize])
        };
        println!(
            "{what}: {} steps; evaluator p50 {:.3} ms, p95 {:.3} ms, max {:.3} ms \
             (stand-in answering probes: p50 {:.3} ms, not included)",
            host.len(),
            q(&host, 0.5),
            q(&host, 0.95),
            q(&host, 1.0),
            q(&self.source, 0.5),
        );
    }
}

fn build(task: &Task) -> Arc<Graph> {
    let t = Instant::now();
    let graph = Arc::new(Graph::build(task, &Library::standard()).unwrap());
    println!(
        "built and validated the {}-node graph in {:.1} ms",
        graph.len(),
        t.elapsed().as_secs_f64() * 1000.0
    );
    graph
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "Methodology: one Evaluator::step at a time on a single-threaded tokio runtime \
         ({cpu}, {cores} cores, bench profile); the thread's CPU time per step \
         (CLOCK_THREAD_CPUTIME_ID), minus the in-memory stand-in's CPU time building probe \
         replies. Every checkpoint is file_exists (one stat probe) over two environments; a \
         step sends one batch per environment and read, split at 1,024 probes. Target: <= 1 ms per step for a \
         10,000-node graph."
    );
    let log = AgentLog::default();

    println!("\nchains: 100 chains x 100 nodes, cross-links every 10th node");
    let graph = build(&chains(10_000));
    let mem = Memory::default();
    let mut ev = Evaluator::new(graph.clone());
    let mut times = Times::default();
    for step in 1..=STEPS as u32 {
        mem.set((0..100).map(|c| format!("/f/c{c}n{}", step - 1)));
        mem.take_spent();
        let t = cpu_now();
        let r = rt.block_on(ev.step(step, &mem, &log)).unwrap();
        times.push(cpu_now() - t, mem.take_spent());
        assert_eq!(r.passed.len(), 100);
    }
    assert!(ev.is_success());
    times.line("chains, 100 ready nodes pass per step (100 read ahead)");
    let mut ev = Evaluator::new(graph);
    let mem = Memory::default();
    let mut times = Times::default();
    for step in 1..=STEPS as u32 {
        let t = cpu_now();
        let r = rt.block_on(ev.step(step, &mem, &log)).unwrap();
        times.push(cpu_now() - t, mem.take_spent());
        assert_eq!((r.checked, r.passed.len()), (100, 0));
    }
    times.line("chains, idle: 100 ready nodes re-checked, none passes");

    println!("\nflat: 10,000 sources, all ready at once");
    let graph = build(&flat(10_000));
    let mem = Memory::default();
    let mut ev = Evaluator::new(graph);
    let mut times = Times::default();
    for step in 1..=STEPS as u32 {
        let t = cpu_now();
        let r = rt.block_on(ev.step(step, &mem, &log)).unwrap();
        times.push(cpu_now() - t, mem.take_spent());
        assert_eq!((r.checked, r.passed.len()), (10_000, 0));
    }
    times.line("flat, idle: 10,000 ready nodes re-checked, none passes");
    let mut times = Times::default();
    mem.set((0..10_000).map(|i| format!("/f/f{i}")));
    let t = cpu_now();
    let r = rt.block_on(ev.step(STEPS as u32 + 1, &mem, &log)).unwrap();
    times.push(cpu_now() - t, mem.take_spent());
    assert_eq!(r.passed.len(), 10_000);
    assert!(ev.is_success());
    times.line("flat, all 10,000 pass in one step");
}
