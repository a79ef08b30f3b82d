//! Host CPU of the graph evaluator: one step of a synthetic 10,000-node graph (chains and
//! fan-ins over two environments, a tenth of the nodes passing per step), with probes
//! answered from memory so only the evaluator's own work is timed.
//!
//! Run: `cargo bench -p pincer --bench evaluator`.

use pincer::env::ClientError;
use pincer::eval::functions::Library;
use pincer::eval::graph::{Evaluator, Graph, ProbeSource};
use pincer::eval::{AgentLog, ProbeResult};
use pincer::task::Task;
use pincer_shared::probe::{FileKind, FileStat, Probe, ProbeReply};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Answers `Stat` from a set of existing paths.
struct Memory(Mutex<HashSet<String>>);

impl ProbeSource for Memory {
    async fn batch(
        &self,
        _role: &str,
        probes: Vec<Probe>,
    ) -> Result<Vec<ProbeResult>, ClientError> {
        let files = self.0.lock().unwrap();
        Ok(probes
            .into_iter()
            .map(|p| match p {
                Probe::Stat { path } => Ok(ProbeReply::Stat(FileStat {
                    exists: files.contains(&path),
                    kind: Some(FileKind::File),
                    size: 1,
                    mode: 0o644,
                    modified_ms: 0,
                    path,
                })),
                other => panic!("unexpected probe {other:?}"),
            })
            .collect())
    }
}

fn synthetic(n: usize) -> Task {
    // 100 chains of n/100 nodes; every 10th node also waits for its neighbour chain.
    let per = n / 100;
    let mut nodes = Vec::with_capacity(n);
    for c in 0..100 {
        for k in 0..per {
            let id = format!("c{c}n{k}");
            let mut after = Vec::new();
            if k > 0 {
                after.push(format!("c{c}n{}", k - 1));
                if k % 10 == 0 && c > 0 {
                    after.push(format!("c{}n{}", c - 1, k - 1));
                }
            }
            nodes.push(serde_json::json!({
                "id": id, "env": if c % 2 == 0 { "desktop" } else { "desktop2" },
                "check": "file_exists", "args": {"path": format!("/f/{id}")}, "after": after
            }));
        }
    }
    serde_json::from_value(serde_json::json!({
        "id": "synthetic", "instruction": "x",
        "envs": {"desktop": {"platform": "linux"}, "desktop2": {"platform": "linux"}},
        "checkpoints": nodes
    }))
    .unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let t = Instant::now();
    let task = synthetic(10_000);
    let graph = Arc::new(Graph::build(&task, &Library::standard()).unwrap());
    println!(
        "built and validated a {}-node graph in {:.1} ms",
        graph.len(),
        t.elapsed().as_secs_f64() * 1000.0
    );
    let mem = Memory(Mutex::new(HashSet::new()));
    let log = AgentLog::default();
    let mut times: Vec<Duration> = Vec::new();
    let mut ev = Evaluator::new(graph.clone());
    let mut step = 0;
    // Each step makes the next node of every chain true: 100 ready nodes checked, 100 pass.
    while !ev.is_success() && step < 200 {
        step += 1;
        {
            let mut files = mem.0.lock().unwrap();
            for c in 0..100 {
                files.insert(format!("/f/c{c}n{}", step - 1));
            }
        }
        let t = Instant::now();
        let r = rt.block_on(ev.step(step, &mem, &log)).unwrap();
        times.push(t.elapsed());
        assert!(r.checked >= 100);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "10,000-node graph, {} steps (100 ready nodes per step, one batch per environment): step p50 {:.3} ms, p95 {:.3} ms, max {:.3} ms (target <= 1 ms)",
        times.len(),
        ms(times[times.len() / 2]),
        ms(times[times.len() * 95 / 100]),
        ms(times[times.len() - 1])
    );
    // The idle case: nothing changes, every ready node is re-checked and fails.
    let mut idle: Vec<Duration> = Vec::new();
    let mut ev = Evaluator::new(graph);
    mem.0.lock().unwrap().clear();
    for s in 1..=200 {
        let t = Instant::now();
        rt.block_on(ev.step(s, &mem, &log)).unwrap();
        idle.push(t.elapsed());
    }
    idle.sort();
    println!(
        "idle step (100 ready nodes, none passing): p50 {:.3} ms",
        ms(idle[100])
    );
}
