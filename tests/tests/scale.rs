//! One run over many machines: shards started by hand sharing a run directory, a real
//! Slurm cluster (Debian's slurmctld and three slurmd on this machine, started once for
//! this test binary) running a sharded run as a job array, a shard cancelled mid-run and
//! resubmitted, and the Kubernetes Job: its manifest checked against the Kubernetes API
//! types (no cluster can run here), and one shard's pod command run for real under podman
//! in the container image built from the `debian-12-minimal` recipe.

use pincer_tests::slurm::Cluster;
use pincer_tests::{Sandbox, bin, results, terminal_suite};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Bundled tasks the equivalence test runs: six apps and settings, two per shard.
const TASKS: [&str; 6] = [
    "calculator-multiply",
    "editor-fix-typo",
    "editor-write-note",
    "settings-dark-mode",
    "settings-left-handed-mouse",
    "terminal-count-lines",
];

/// The cluster of this test binary, shared by its tests (one at a time: three nodes).
fn cluster() -> std::sync::MutexGuard<'static, Cluster> {
    static CLUSTER: OnceLock<Mutex<Cluster>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| Mutex::new(Cluster::start()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn run_args<'a>(out: &'a Path, tasks: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--tasks", "demo", "--agent", "oracle"];
    for t in tasks {
        args.extend(["--task", t]);
    }
    args.extend(["--out", out.to_str().unwrap()]);
    args
}

/// What a run scored per task run: (termination, passed, total).
fn scores(out: &Path) -> BTreeMap<(String, u64), (String, u64, u64)> {
    results(out)
        .into_iter()
        .map(|r| {
            (
                (
                    r["task"].as_str().unwrap().to_owned(),
                    r["repeat"].as_u64().unwrap(),
                ),
                (
                    r["termination"].as_str().unwrap().to_owned(),
                    r["passed"].as_u64().unwrap(),
                    r["total"].as_u64().unwrap(),
                ),
            )
        })
        .collect()
}

#[test]
fn shards_started_by_hand_share_one_run_and_refuse_another() {
    let sb = Sandbox::new();
    let out = sb.path().join("run");
    let tasks = [
        "editor-write-note",
        "settings-dark-mode",
        "terminal-count-lines",
    ];
    let children: Vec<_> = (0..2)
        .map(|k| {
            let mut args = run_args(&out, &tasks);
            let shard = format!("{k}/2");
            args.extend(["--shard", &shard, "--no-report"]);
            sb.pincer_command(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    // Round robin: shard 0 has task runs 0 and 2, shard 1 task run 1.
    let of = |k: u32| {
        let p = out.join(format!("shards/{k}/results.jsonl"));
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["task"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(of(0), vec!["editor-write-note", "terminal-count-lines"]);
    assert_eq!(of(1), vec!["settings-dark-mode"]);
    let s = scores(&out);
    assert_eq!(s.len(), 3);
    assert!(s.values().all(|(t, _, _)| t == "success"), "{s:?}");

    let status = sb.pincer_ok(&["run", "status", out.to_str().unwrap()]);
    assert!(status.contains("3 task runs in 2 shards"), "{status}");
    assert!(
        status.contains("all") && status.contains("3/3") && status.contains("complete"),
        "{status}"
    );
    assert_eq!(status.matches(" done ").count(), 2, "{status}");

    // The report merges the shards.
    sb.pincer_ok(&["report", out.to_str().unwrap()]);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for t in tasks {
        assert!(md.contains(t), "{t} missing from the report");
    }

    // Another run, or the run unsharded, or the same shard again without --resume: refused
    // before any desktop starts.
    let mut other = run_args(&out, &tasks);
    other[4] = "random";
    other.extend(["--shard", "0/2", "--resume"]);
    let e = text(&sb.pincer(&other));
    assert!(
        e.contains("holds another run (agent 'oracle' (here: 'random'))"),
        "{e}"
    );
    assert!(!e.contains("starting"), "{e}");
    let mut unsharded = run_args(&out, &tasks);
    unsharded.push("--resume");
    let e = text(&sb.pincer(&unsharded));
    assert!(e.contains("2 shards (here: not sharded)"), "{e}");
    let mut again = run_args(&out, &tasks);
    again.extend(["--shard", "1/2"]);
    let e = text(&sb.pincer(&again));
    assert!(e.contains("already holds results: pass --resume"), "{e}");
    // Resuming a finished shard runs nothing and still counts it done.
    let mut resume = run_args(&out, &tasks);
    resume.extend(["--shard", "1/2", "--resume", "--no-report"]);
    let o = sb.pincer(&resume);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(results(&out).len(), 3);
}

#[test]
fn a_shard_is_run_by_one_process_at_a_time() {
    let sb = Sandbox::new();
    let out = sb.path().join("run");
    // One task whose oracle idles 5 s, long enough for the second process to find the
    // first at work.
    let suite = terminal_suite(sb.path(), 1, 5000);
    let args = suite_args(&suite, &out, &["--shard", "0/1"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut first = sb
        .pincer_command(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&out.join("shards/0/started.json"), 60);
    let second = suite_args(&suite, &out, &["--shard", "0/1", "--resume"]);
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    let e = text(&sb.pincer(&second));
    assert!(
        e.contains("is being run by another process") && e.contains(&format!("pid {}", first.id())),
        "{e}"
    );
    assert!(first.wait().unwrap().success());
    assert_eq!(results(&out).len(), 1);
}

/// `pincer run ... --slurm` with the cluster's configuration.
fn slurm_run(sb: &Sandbox, c: &Cluster, args: &[&str]) -> Command {
    let mut cmd = sb.pincer_command(args);
    cmd.envs(c.env());
    cmd
}

/// `pincer run` arguments for the oracle on the suite in `suite`, into `out`, then `extra`.
fn suite_args(suite: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--tasks",
        suite.to_str().unwrap(),
        "--agent",
        "oracle",
    ]
    .into_iter()
    .chain(["--out", out.to_str().unwrap(), "--no-report"])
    .map(str::to_owned)
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// Starts `pincer ARGS` on the cluster `c` with its output piped.
fn spawn_slurm_run(sb: &Sandbox, c: &Cluster, args: &[String]) -> std::process::Child {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    slurm_run(sb, c, &args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits up to `secs` for `path` to exist; whether it does.
fn wait_for(path: &Path, secs: u64) -> bool {
    let t = Instant::now();
    while !path.exists() && t.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(50));
    }
    path.exists()
}

/// Asserts that each of `n` tasks has exactly one record in `out` (all of them successes,
/// if `successes`), whatever was interrupted on the way.
fn assert_each_task_run_once(out: &Path, n: usize, successes: bool) {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in results(out) {
        *seen
            .entry(r["task"].as_str().unwrap().to_owned())
            .or_default() += 1;
        if successes {
            assert_eq!(r["termination"], "success", "{r}");
        }
    }
    assert_eq!(seen.len(), n, "{seen:?}");
    assert!(seen.values().all(|k| *k == 1), "{seen:?}");
}

#[test]
fn a_run_sharded_over_three_slurm_nodes_scores_like_one_machine() {
    let sb = Sandbox::new();
    let one = sb.path().join("one");
    let mut args = run_args(&one, &TASKS);
    args.push("--no-report");
    sb.pincer_ok(&args);
    let baseline = scores(&one);
    assert_eq!(baseline.len(), TASKS.len());

    let c = cluster();
    let sharded = sb.path().join("sharded");
    let mut args = run_args(&sharded, &TASKS);
    args.extend(["--slurm", "--shards", "3"]);
    let o = slurm_run(&sb, &c, &args).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}\n{}", c.logs());
    assert_eq!(scores(&sharded), baseline, "{t}");
    assert_eq!(results(&sharded).len(), TASKS.len(), "each task run once");
    // One array task per node, each shard two task runs, and the numbers of the overhead.
    let mut nodes: Vec<String> = (0..3)
        .map(|k| {
            let s: Value = serde_json::from_str(
                &std::fs::read_to_string(sharded.join(format!("shards/{k}/started.json"))).unwrap(),
            )
            .unwrap();
            let job = s["job"].as_str().unwrap().to_owned();
            assert!(job.starts_with("slurm job "), "{job}");
            job.rsplit(' ').next().unwrap().to_owned()
        })
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["node1", "node2", "node3"], "{t}");
    assert!(t.contains("submitted job array"), "{t}");
    assert!(t.contains("6/6 task runs finished"), "{t}");
    assert!(
        t.contains("sharding overhead: submit to first task run started"),
        "{t}"
    );
    assert!(sharded.join("report.html").is_file());
    let script = std::fs::read_to_string(sharded.join("slurm/job.sh")).unwrap();
    assert!(script.contains("#SBATCH --array=0-2"), "{script}");
    assert!(
        script.contains("--shard \"${SLURM_ARRAY_TASK_ID}/3\""),
        "{script}"
    );
}

#[test]
fn a_shard_cancelled_mid_run_is_resubmitted_and_every_task_run_is_recorded_once() {
    let sb = Sandbox::new();
    let suite = terminal_suite(sb.path(), 6, 4000);
    let out = sb.path().join("run");
    let c = cluster();
    let child = spawn_slurm_run(
        &sb,
        &c,
        &suite_args(&suite, &out, &["--slurm", "--shards", "3"]),
    );
    // Shard 1 owns t1 and t4: cancel it while it works on one of them.
    let started = out.join("shards/1/started.json");
    assert!(
        wait_for(&started, 120),
        "shard 1 never started\n{}",
        c.logs()
    );
    std::thread::sleep(Duration::from_secs(3));
    let job = {
        let s: Value = serde_json::from_str(&std::fs::read_to_string(&started).unwrap()).unwrap();
        let j = s["job"].as_str().unwrap().to_owned();
        j.split_whitespace().nth(2).unwrap().to_owned()
    };
    assert!(job.ends_with("_1"), "{job}");
    let cancel = c.command("scancel").arg(&job).output().unwrap();
    assert!(cancel.status.success(), "{}", text(&cancel));
    let o = child.wait_with_output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}\n{}", c.logs());
    // Caught in the middle: fewer than its two task runs were finished.
    assert!(
        t.contains(&format!("shard 1 (job {job} on "))
            && (t.contains("ended CANCELLED with 0/2") || t.contains("ended CANCELLED with 1/2")),
        "{t}"
    );
    assert!(t.contains("resubmitted as job"), "{t}");
    // Every task run exactly once, all successful, whatever the cancel interrupted.
    assert_each_task_run_once(&out, 6, true);
    // Two attempts of shard 1, each with its own Slurm log.
    let logs = std::fs::read_dir(out.join("shards/1"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
        .count();
    assert_eq!(logs, 2);
    let status = sb.pincer_ok(&["run", "status", out.to_str().unwrap()]);
    assert!(
        status.contains("6/6") && status.contains("complete"),
        "{status}"
    );
    assert!(!status.contains("more than once"), "{status}");
}

#[test]
fn a_shard_whose_node_dies_is_resubmitted_to_another_node() {
    let sb = Sandbox::new();
    let suite = terminal_suite(sb.path(), 6, 4000);
    let out = sb.path().join("run");
    // A cluster of its own: this test takes a node away.
    let c = Cluster::start();
    let child = spawn_slurm_run(
        &sb,
        &c,
        &suite_args(&suite, &out, &["--slurm", "--shards", "3"]),
    );
    // Find the shard node2 runs, once every shard has started.
    let on = |k: u32| -> Option<String> {
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("shards/{k}/started.json"))).ok()?,
        )
        .ok()?;
        Some(s["job"].as_str()?.to_owned())
    };
    let t = Instant::now();
    let victim = loop {
        let jobs: Vec<Option<String>> = (0..3).map(on).collect();
        if jobs.iter().all(Option::is_some) {
            break jobs
                .iter()
                .position(|j| j.as_deref().is_some_and(|j| j.ends_with(" on node2")))
                .expect("a shard on node2") as u32;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "shards did not start\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(2));
    c.kill_node(2);
    let o = child.wait_with_output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}\n{}", c.logs());
    assert!(
        t.contains(&format!("shard {victim} (job ")) && t.contains("on node2) ended NODE_FAIL"),
        "{t}"
    );
    assert!(t.contains("resubmitted as job"), "{t}");
    let again = on(victim).unwrap();
    assert!(!again.ends_with(" on node2"), "{again}");
    assert_each_task_run_once(&out, 6, true);
}

#[test]
fn a_shard_someone_else_is_running_is_waited_for_not_run_twice() {
    let sb = Sandbox::new();
    // The cluster first: the by-hand shard must still run when Slurm's starts.
    let c = cluster();
    let suite = terminal_suite(sb.path(), 6, 5000);
    let out = sb.path().join("run");
    // Shard 1 started by hand (an earlier submission still running, as far as the run
    // directory can tell).
    let by_hand_args = suite_args(&suite, &out, &["--shard", "1/3"]);
    let by_hand_args: Vec<&str> = by_hand_args.iter().map(String::as_str).collect();
    let mut by_hand = sb
        .pincer_command(&by_hand_args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&out.join("shards/1/started.json"), 60);
    let slurm_args = suite_args(&suite, &out, &["--slurm", "--shards", "3", "--resume"]);
    let slurm_args: Vec<&str> = slurm_args.iter().map(String::as_str).collect();
    let o = slurm_run(&sb, &c, &slurm_args).output().unwrap();
    let t = text(&o);
    assert!(o.status.success(), "{t}\n{}", c.logs());
    assert!(
        t.contains(&format!(
            "shard 1: another process runs it (pid {} on ",
            by_hand.id()
        )),
        "{t}"
    );
    assert_each_task_run_once(&out, 6, false);
    // Shard 1's task runs are the by-hand process's, which finished its share.
    assert!(by_hand.wait().unwrap().success());
    let shard1 = std::fs::read_to_string(out.join("shards/1/results.jsonl")).unwrap();
    assert_eq!(shard1.lines().count(), 2);
}

#[test]
fn slurm_mistakes_are_named_before_anything_runs() {
    let sb = Sandbox::new();
    let out = sb.path().join("run");
    let mut args = run_args(&out, &["settings-dark-mode"]);
    args.extend(["--slurm", "--shards", "2"]);
    // No Slurm on PATH.
    let o = sb
        .pincer_command(&args)
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let e = text(&o);
    assert!(!o.status.success());
    assert!(e.contains("'sbatch' was not found on PATH"), "{e}");
    assert!(!out.exists(), "nothing is written without Slurm");
    // A submission Slurm refuses: the run directory is left as it was.
    let c = cluster();
    let mut refused = args.clone();
    refused.extend(["--slurm-opt", "--partition=nowhere"]);
    let o = slurm_run(&sb, &c, &refused).output().unwrap();
    let e = text(&o);
    assert!(!o.status.success());
    assert!(
        e.contains("sbatch refused the job") && e.contains("nowhere"),
        "{e}"
    );
    assert!(!out.exists(), "{e}");
    // --shards without an engine, an engine without --shards.
    let e = text(
        &sb.pincer(
            &[
                &run_args(&out, &["settings-dark-mode"])[..],
                &["--shards", "2"],
            ]
            .concat(),
        ),
    );
    assert!(
        e.contains("--shards N goes with --slurm or --kubernetes"),
        "{e}"
    );
    let e =
        text(&sb.pincer(&[&run_args(&out, &["settings-dark-mode"])[..], &["--slurm"]].concat()));
    assert!(e.contains("need --shards N"), "{e}");
}

#[test]
fn a_node_that_does_not_share_the_run_directory_is_named() {
    let sb = Sandbox::new();
    let shared = sb.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    // node3 sees an empty file system where the others see the run directory.
    let c = Cluster::start_hiding(3, &shared);
    let out = shared.join("run");
    let mut args = run_args(
        &out,
        &[
            "editor-write-note",
            "settings-dark-mode",
            "terminal-count-lines",
        ],
    );
    args.extend(["--slurm", "--shards", "3", "--no-report"]);
    let o = slurm_run(&sb, &c, &args).output().unwrap();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("on node3) never wrote into"), "{t}");
    assert!(
        t.contains("must be on a file system every node mounts at the same path"),
        "{t}"
    );
    // The run is not left running in pieces: its other jobs are cancelled.
    let left = c
        .command("squeue")
        .args(["-h", "-o", "%i %T"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout).into_owned();
    assert!(
        !left.contains("RUNNING") && !left.contains("PENDING"),
        "{left}"
    );
}

#[test]
fn cluster_nodes_serve_desktops_that_dial_one_central_runner() {
    use std::io::BufRead;
    let sb = Sandbox::new();
    let c = cluster();
    // The central host listens; what dials in with its token is trusted and registered.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut listen = sb
        .pincer_command(&["env", "listen", &addr, "--accept-new", "--count", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(listen.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let fingerprint = first
        .split("host fingerprint ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .expect("the host's fingerprint")
        .to_owned();
    let token = sb.path().join("state/host/token");
    // Each array task: a desktop on its node whose agent dials the host, kept until the
    // job ends.
    let script = sb.path().join("guests.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nname=guest$SLURM_ARRAY_TASK_ID\nexport PINCER_STATE_DIR=/tmp/pincer-guest-$SLURM_JOB_ID PINCER_ENVS=/tmp/pincer-guest-$SLURM_JOB_ID/envs.toml\n\
             trap '{pincer} desktop down $name; rm -rf \"$PINCER_STATE_DIR\"; exit 0' TERM INT\n\
             {pincer} desktop up --name $name --connect {addr} --host-token-file {token} --host-fingerprint {fingerprint} || exit 1\n\
             sleep 600 & wait\n",
            pincer = bin("pincer").display(),
            token = token.display(),
        ),
    )
    .unwrap();
    let out = c
        .command("sbatch")
        .args(["--parsable", "--array=0-1"])
        .arg(format!("--output={}/guest-%a.log", sb.path().display()))
        .arg(&script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let job = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let registered = listen.wait_with_output().unwrap();
    let said = text(&registered);
    assert!(registered.status.success(), "{said}\n{}", c.logs());
    assert!(
        said.contains("guest 'guest0' registered") && said.contains("guest 'guest1' registered"),
        "{said}"
    );
    // The runner uses them as two environment sets.
    let run = sb.path().join("run");
    let mut args = run_args(
        &run,
        &[
            "editor-write-note",
            "settings-dark-mode",
            "terminal-count-lines",
        ],
    );
    args.extend([
        "--set",
        "desktop=guest0",
        "--set",
        "desktop=guest1",
        "--no-report",
    ]);
    let o = sb.pincer(&args);
    let t = text(&o);
    let _ = c.command("scancel").arg(&job).output();
    assert!(o.status.success(), "{t}");
    let s = scores(&run);
    assert_eq!(s.len(), 3, "{t}");
    assert!(s.values().all(|(term, _, _)| term == "success"), "{s:?}");
    let sets: std::collections::BTreeSet<String> = results(&run)
        .iter()
        .map(|r| r["env_set"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sets.len(), 2, "both guests ran tasks: {sets:?}");
}

const IMAGE: &str = "debian-12-minimal";

/// The Job `--dry-run` prints for `tasks` over `shards`.
fn manifest(sb: &Sandbox, name: &str, tasks: &[&str], shards: &str) -> Value {
    manifest_with(sb, name, tasks, shards, &[])
}

/// [`manifest`] with more `pincer run` arguments.
fn manifest_with(sb: &Sandbox, name: &str, tasks: &[&str], shards: &str, extra: &[&str]) -> Value {
    let out = sb.path().join(name);
    let mut args = run_args(&out, tasks);
    args.extend_from_slice(extra);
    args.extend([
        "--kubernetes",
        "--shards",
        shards,
        "--image",
        "localhost/pincer/x:1",
        "--dry-run",
    ]);
    serde_json::from_str(&sb.pincer_ok(&args)).unwrap()
}

#[test]
fn the_kubernetes_job_is_an_indexed_job_of_the_api_types() {
    let sb = Sandbox::new();
    let job = manifest(&sb, "demo-run", &["settings-dark-mode"], "3");
    // Read as the API's own types and written back, nothing is lost: every field is one
    // Kubernetes knows, in the place it expects it.
    let typed: k8s_openapi::api::batch::v1::Job = serde_json::from_value(job.clone()).unwrap();
    assert_eq!(serde_json::to_value(&typed).unwrap(), job);
    let spec = typed.spec.unwrap();
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    assert_eq!((spec.completions, spec.parallelism), (Some(3), Some(3)));
    assert_eq!(spec.backoff_limit_per_index, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let vol = &pod.volumes.unwrap()[0];
    assert_eq!(
        vol.persistent_volume_claim.as_ref().unwrap().claim_name,
        "pincer-runs"
    );
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("localhost/pincer/x:1"));
    assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/runs");
    let cmd = c.command.as_ref().unwrap();
    assert_eq!(cmd[..2], ["sh", "-c"]);
    assert!(
        cmd[2].starts_with("exec pincer run --tasks demo --agent oracle --task settings-dark-mode"),
        "{}",
        cmd[2]
    );
    assert!(
        cmd[2].contains(
            "--out /runs/demo-run --resume --no-report --shard \"${JOB_COMPLETION_INDEX}/3\""
        ),
        "{}",
        cmd[2]
    );
    assert_eq!(typed.metadata.name.as_deref(), Some("demo-run"));
    // Names Kubernetes would refuse are made into DNS labels, or refused.
    let job = manifest(&sb, "Run_2026", &["settings-dark-mode"], "1");
    assert_eq!(job["metadata"]["name"], "run-2026");
    // Without a cluster, creating it says what is missing.
    let out = sb.path().join("x");
    let mut args = run_args(&out, &["settings-dark-mode"]);
    args.extend(["--kubernetes", "--shards", "2", "--image", "i"]);
    let o = sb
        .pincer_command(&args)
        .env("KUBECONFIG", sb.path().join("none"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let e = text(&o);
    assert!(!o.status.success());
    assert!(e.contains("no Kubernetes cluster configured"), "{e}");
}

/// `pincer run ... --kubernetes` against a stand-in API server.
fn kube_run(
    sb: &Sandbox,
    api: &pincer_tests::kube::ApiServer,
    name: &str,
    extra: &[&str],
) -> Output {
    let out = sb.path().join(name);
    let mut args = run_args(&out, &["settings-dark-mode"]);
    args.extend([
        "--kubernetes",
        "--shards",
        "3",
        "--image",
        "localhost/pincer/x:1",
    ]);
    args.extend_from_slice(extra);
    sb.pincer_command(&args)
        .env("KUBECONFIG", api.kubeconfig(sb.path()))
        .output()
        .unwrap()
}

#[test]
fn the_job_is_created_and_followed_through_the_api_of_a_stand_in_server() {
    use serde_json::json;
    let sb = Sandbox::new();
    // The Job controller's statuses, as a real one reports them.
    let api = pincer_tests::kube::ApiServer::start(vec![
        json!({"active": 3}),
        json!({"active": 1, "succeeded": 2, "completedIndexes": "0,2"}),
        json!({"succeeded": 3, "completedIndexes": "0-2",
               "conditions": [{"type": "Complete", "status": "True"}]}),
    ]);
    let o = kube_run(&sb, &api, "k8s-run", &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("created Job default/k8s-run (3 pods"), "{t}");
    assert!(t.contains("shards done 2/3, running 1"), "{t}");
    assert!(t.contains("shards done 3/3"), "{t}");
    assert!(
        t.contains("the run directory is k8s-run/ on the volume pincer-runs"),
        "{t}"
    );
    // What was created is exactly the manifest --dry-run prints.
    let mut sent = api.job().expect("a Job was created");
    sent["metadata"].as_object_mut().unwrap().remove("uid");
    assert_eq!(sent, manifest(&sb, "k8s-run", &["settings-dark-mode"], "3"));
    let reqs = api.requests();
    assert_eq!(reqs[0].0, "POST");
    assert!(
        reqs[1..]
            .iter()
            .all(|(m, p)| m == "GET" && p.ends_with("/jobs/k8s-run")),
        "{reqs:?}"
    );

    // A Job whose shard ran out of retries fails the run, naming the shard.
    let api = pincer_tests::kube::ApiServer::start(vec![json!({
        "failed": 3, "succeeded": 2, "completedIndexes": "0,2", "failedIndexes": "1",
        "conditions": [{"type": "Failed", "status": "True", "reason": "FailedIndexes"}]
    })]);
    let o = kube_run(&sb, &api, "k8s-fail", &[]);
    let e = text(&o);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("the Job k8s-fail failed (FailedIndexes); failed shards: 1"),
        "{e}"
    );
    assert!(e.contains("--resume"), "{e}");
    // The same run again: refused while its Job exists; with --resume the finished Job is
    // replaced by a new one.
    let o = kube_run(&sb, &api, "k8s-fail", &[]);
    let e = text(&o);
    assert!(!o.status.success());
    assert!(e.contains("a Job named k8s-fail exists"), "{e}");
    let o = kube_run(&sb, &api, "k8s-fail", &["--resume"]);
    let e = text(&o);
    assert!(
        e.contains("a Job k8s-fail exists (the run's earlier attempt): replacing it"),
        "{e}"
    );
    assert!(e.contains("created Job default/k8s-fail"), "{e}");
    let methods: Vec<String> = api.requests().into_iter().map(|(m, _)| m).collect();
    assert!(
        methods.windows(2).any(|w| w == ["DELETE", "GET"]),
        "{methods:?}"
    );
}

#[test]
fn a_pod_runs_its_shard_in_the_recipe_container_image_under_podman() {
    let sb = Sandbox::new();
    let tag = pincer_tests::container_image(&sb, IMAGE);
    let tasks = ["editor-write-note", "settings-dark-mode"];
    let job = manifest(&sb, "pod-run", &tasks, "2");
    let volume = sb.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    let o = pod(&job, &tag, &volume, &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let run = volume.join("pod-run");
    let shard0: Vec<Value> = std::fs::read_to_string(run.join("shards/0/results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(shard0.len(), 1, "{t}");
    assert_eq!(shard0[0]["task"], "editor-write-note");
    assert_eq!(shard0[0]["termination"], "success", "{t}");
    let started: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("shards/0/started.json")).unwrap())
            .unwrap();
    assert!(
        started["job"]
            .as_str()
            .unwrap()
            .starts_with("kubernetes pod "),
        "{started}"
    );
    assert!(run.join("shards/0/done.json").is_file());
    let status = sb.pincer_ok(&["run", "status", run.to_str().unwrap()]);
    assert!(
        status.contains("1/2") && status.contains("incomplete"),
        "{status}"
    );
}

/// `podman run` of a pod of `job`: its image's command with the volume at /runs, the Job's
/// variables and this pod's index; the pincer and agent of this build mounted over the
/// image's, which are as old as the cached image.
fn pod(job: &Value, image: &str, volume: &Path, mounts: &[(&Path, &str)]) -> Output {
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    let mut cmd = pincer_tests::podman_run();
    cmd.arg("-v").arg(format!("{}:/runs", volume.display()));
    for (from, to) in mounts {
        cmd.arg("-v").arg(format!("{}:{to}", from.display()));
    }
    for b in ["pincer", "pincer-agent"] {
        cmd.arg("-v")
            .arg(format!("{}:/usr/local/bin/{b}:ro", bin(b).display()));
    }
    cmd.args(["-e", "JOB_COMPLETION_INDEX=0"]);
    for e in container["env"].as_array().unwrap() {
        cmd.arg("-e").arg(format!(
            "{}={}",
            e["name"].as_str().unwrap(),
            e["value"].as_str().unwrap()
        ));
    }
    let line = container["command"][2].as_str().unwrap();
    cmd.arg(image).args(["sh", "-c", line]).output().unwrap()
}

#[test]
fn a_pod_runs_a_vm_shard_with_qemu_inside_the_container() {
    let sb = Sandbox::new();
    // The pods' image (QEMU inside), and the VM image its shards boot.
    let runner = pincer_tests::container_image(&sb, "debian-12-qemu");
    pincer_tests::container_image(&sb, IMAGE);
    let tasks = ["editor-fix-typo", "settings-dark-mode"];
    let job = manifest_with(&sb, "vm-run", &tasks, "2", &["--vm", IMAGE, "--kvm"]);
    let spec = &job["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["privileged"], true);
    assert!(c["env"].as_array().unwrap().contains(
        &serde_json::json!({"name": "PINCER_IMAGE_CACHE", "value": "/runs/.pincer/images"})
    ));
    let kvm = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "kvm")
        .expect("a kvm volume");
    assert_eq!(
        kvm["hostPath"],
        serde_json::json!({"path": "/dev/kvm", "type": "CharDevice"})
    );
    let line = c["command"][2].as_str().unwrap();
    assert!(line.contains("--vm debian-12-minimal"), "{line}");
    // The pod here: the VM images on the volume are this machine's image cache; this
    // machine's /dev/kvm is unusable (no vmx/svm), so the pod gets none and pincer's probe
    // runs QEMU with TCG.
    let volume = sb.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    let cache = pincer::paths::image_cache_dir();
    let o = pod(&job, &runner, &volume, &[(&cache, "/runs/.pincer/images")]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let recs: Vec<Value> = std::fs::read_to_string(volume.join("vm-run/shards/0/results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 1, "{t}");
    assert_eq!(recs[0]["task"], "editor-fix-typo");
    assert_eq!(recs[0]["termination"], "success", "{t}");
    assert!(t.contains("starting 1 VMs of debian-12-minimal"), "{t}");
    assert!(t.contains("up (tcg)"), "{t}");
}
