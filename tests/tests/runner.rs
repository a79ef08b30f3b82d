//! The benchmark runner against real local desktops: parallel environment sets, resuming
//! after the runner was killed, an environment dying mid-task, and an agent restart the
//! host rides out.

use pincer_tests::{DesktopFootprint, Sandbox, bin, results, terminal_suite as suite};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `pincer run` arguments for the oracle on the suite in `tasks`, writing to `out`, then
/// `extra`.
fn oracle_run<'a>(tasks: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "--tasks",
        tasks.to_str().unwrap(),
        "--agent",
        "oracle",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args
}

/// Starts `pincer ARGS` in the sandbox, its stderr piped.
fn spawn_pincer(sb: &Sandbox, args: &[&str]) -> Child {
    Command::new(bin("pincer"))
        .args(args)
        .env("PINCER_STATE_DIR", sb.path().join("state"))
        .env("PINCER_ENVS", sb.path().join("envs.toml"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// An oracle run of `tasks` into `out`, once its first task has taken its first step.
fn started_run(sb: &Sandbox, tasks: &Path, out: &Path, extra: &[&str], within: u64) -> Child {
    let child = spawn_pincer(sb, &oracle_run(tasks, out, extra));
    assert!(
        wait_until(Duration::from_secs(within), || out
            .join("tasks/t0__r0/step-001-desktop-marks.png")
            .exists()),
        "the first task never took its first step"
    );
    child
}

/// Local desktops `pincer run` made, with their state files.
fn run_desktops(sb: &Sandbox) -> Vec<Value> {
    let dir = sb.path().join("state/desktops");
    std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("desktop.json")).ok())
                .filter_map(|t| serde_json::from_str(&t).ok())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn parallel_sets_share_the_work() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 8, 200);
    let out = sb.path().join("out");
    // Four sets on this 2-core machine, as the issue asks of the runner.
    let args = oracle_run(
        &tasks,
        &out,
        &["--parallel", "4", "--no-report", "--size", "1024x768"],
    );
    let stdout = sb.pincer_ok(&args);
    assert!(stdout.contains("single-desktop"), "{stdout}");
    let recs = results(&out);
    assert_eq!(recs.len(), 8);
    assert!(
        recs.iter().all(|r| r["termination"] == "success"),
        "{recs:?}"
    );
    let sets: std::collections::BTreeSet<&str> = recs
        .iter()
        .map(|r| r["env_set"].as_str().unwrap())
        .collect();
    assert_eq!(
        sets.into_iter().collect::<Vec<_>>(),
        vec!["s0", "s1", "s2", "s3"],
        "every set worked"
    );
    assert!(run_desktops(&sb).is_empty(), "the run stopped its desktops");
}

#[test]
fn a_killed_run_resumes_without_redoing_finished_tasks() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 3, 1500);
    let out = sb.path().join("out");
    let mut child = spawn_pincer(
        &sb,
        &oracle_run(&tasks, &out, &["--no-report", "--size", "1024x768"]),
    );
    assert!(
        wait_until(Duration::from_secs(120), || !results(&out).is_empty()),
        "no task finished"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let first = results(&out);
    assert!(!first.is_empty() && first.len() < 3, "{first:?}");

    let resumed = sb.pincer(&oracle_run(
        &tasks,
        &out,
        &["--no-report", "--resume", "--size", "1024x768"],
    ));
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(String::from_utf8_lossy(&resumed.stderr).contains("already finished"));
    let all = results(&out);
    assert_eq!(all.len(), 3, "each task once: {all:?}");
    let ids: std::collections::BTreeSet<&str> =
        all.iter().map(|r| r["task"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    assert!(all.iter().all(|r| r["termination"] == "success"));
    // The records written before the kill are untouched.
    assert_eq!(&all[..first.len()], &first[..]);
    // Without --resume the runner refuses to mix runs.
    let again = sb.pincer(&oracle_run(&tasks, &out, &[]));
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--resume"));
}

#[test]
fn an_environment_dying_mid_task_ends_only_that_task() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 4, 2500);
    let out = sb.path().join("out");
    let mut child = spawn_pincer(
        &sb,
        &oracle_run(
            &tasks,
            &out,
            &["--parallel", "2", "--no-report", "--size", "1024x768"],
        ),
    );
    // Once both sets are working, take set s0's desktop away entirely.
    let started = wait_until(Duration::from_secs(120), || {
        std::fs::read_dir(out.join("tasks"))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join("step-001-desktop-marks.png").exists())
                    .count()
                    >= 2
            })
            .unwrap_or(false)
    });
    assert!(started, "the tasks never started");
    let s0 = run_desktops(&sb)
        .into_iter()
        .find(|d| d["name"].as_str().unwrap().contains("-s0-"))
        .expect("set s0's desktop");
    let supervisor = s0["supervisor_pid"].as_i64().unwrap() as i32;
    // SAFETY: stopping the desktop the runner made for set s0.
    unsafe {
        libc::kill(supervisor, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    let recs = results(&out);
    assert_eq!(recs.len(), 4, "every task has a record: {recs:?}\n{stderr}");
    let failed: Vec<&Value> = recs
        .iter()
        .filter(|r| r["termination"] != "success")
        .collect();
    assert_eq!(failed.len(), 1, "{recs:?}");
    assert_eq!(failed[0]["termination"], "environment-error");
    assert_eq!(failed[0]["env_set"], "s0");
    assert!(
        stderr.contains("s0: an environment of this set is gone"),
        "{stderr}"
    );
}

#[test]
fn an_agent_restart_mid_task_is_ridden_out() {
    let sb = Sandbox::new();
    let d = sb.desktop("restart", "1024x768", &[]);
    let tasks = suite(sb.path(), 1, 3000);
    let out = sb.path().join("out");
    let mut child = started_run(
        &sb,
        &tasks,
        &out,
        &["--set", "desktop=restart", "--no-report"],
        60,
    );
    // The oracle is idling; kill the guest agent. The supervisor restarts it and the host
    // reconnects on its next call.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pid = rt.block_on(async { d.connect().await.info().unwrap().pid });
    // SAFETY: killing the agent of our own desktop.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    let recs = results(&out);
    assert_eq!(recs[0]["termination"], "success", "{recs:?}");
    let new_pid = rt.block_on(async { d.connect().await.info().unwrap().pid });
    assert_ne!(pid, new_pid, "the agent really restarted");
}

#[test]
fn ctrl_c_records_the_running_task_as_aborted_and_stops_the_desktops() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 2, 4000);
    let out = sb.path().join("out");
    let mut child = started_run(
        &sb,
        &tasks,
        &out,
        &["--no-report", "--size", "1024x768"],
        120,
    );
    // SAFETY: interrupting our own child, as Ctrl-C in its terminal would.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "an interrupted run is not a success");
    assert!(stderr.contains("continue with --resume"), "{stderr}");
    let recs = results(&out);
    assert_eq!(recs.len(), 1, "only the running task is recorded: {recs:?}");
    assert_eq!(recs[0]["termination"], "aborted");
    assert!(run_desktops(&sb).is_empty(), "the desktops were stopped");

    // Resuming redoes the aborted task and runs the other.
    sb.pincer_ok(&oracle_run(
        &tasks,
        &out,
        &["--no-report", "--resume", "--size", "1024x768"],
    ));
    let recs = results(&out);
    let done: Vec<(&str, &str)> = recs
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap(),
                r["termination"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        done,
        [("t0", "aborted"), ("t0", "success"), ("t1", "success")],
        "{recs:?}"
    );
}

#[test]
fn sigterm_stops_the_desktops_the_run_started() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 1, 4000);
    let out = sb.path().join("out");
    let mut child = spawn_pincer(
        &sb,
        &oracle_run(&tasks, &out, &["--no-report", "--size", "1024x768"]),
    );
    assert!(
        wait_until(Duration::from_secs(120), || !run_desktops(&sb).is_empty()
            && out.join("tasks/t0__r0").exists()),
        "the run never started its desktop"
    );
    // SAFETY: terminating our own child, as a service manager or `kill` would.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status}");
    assert!(
        run_desktops(&sb).is_empty(),
        "the desktops outlived the run"
    );
}

#[test]
fn a_killed_run_takes_its_desktops_with_it() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 1, 30_000);
    let out = sb.path().join("out");
    let mut child = started_run(
        &sb,
        &tasks,
        &out,
        &["--no-report", "--size", "1024x768"],
        120,
    );
    let desktops: Vec<DesktopFootprint> =
        run_desktops(&sb).iter().map(DesktopFootprint::of).collect();
    assert_eq!(desktops.len(), 1);
    assert!(
        desktops[0].processes.len() >= 4,
        "supervisor, Xvfb, D-Bus, agent at least: {:?}",
        desktops[0].processes
    );
    let registered = |name: &str| sb.registry().load().unwrap().envs.contains_key(name);
    assert!(registered(&desktops[0].name));
    // No Ctrl-C, no cleanup: the runner just stops existing (the oracle is idling).
    child.kill().unwrap();
    child.wait().unwrap();
    for d in &desktops {
        let left = d.wait_gone(Duration::from_secs(20));
        assert!(left.is_empty(), "desktop {} left {left:?}", d.name);
        assert!(!registered(&d.name), "{} is still in the envs file", d.name);
    }
    assert!(run_desktops(&sb).is_empty(), "a desktop.json is left");
    let listed = sb.pincer_ok(&["desktop", "list"]);
    assert!(listed.contains("no local desktops are up"), "{listed}");
}

#[test]
fn a_run_killed_while_its_desktop_starts_takes_the_desktop_down_at_once() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 1, 0);
    let out = sb.path().join("out");
    // The run's desktops get an agent that takes 12 s to start (`pincer` finds its agent
    // next to itself), so the desktop is still starting when the run dies.
    let bins = sb.path().join("slow agent");
    std::fs::create_dir_all(&bins).unwrap();
    std::os::unix::fs::symlink(bin("pincer"), bins.join("pincer")).unwrap();
    let mark = sb.path().join("agent starting");
    let agent = bins.join("pincer-agent");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\necho \"$PPID $PINCER_DESKTOP $DISPLAY\" > '{}.tmp' && mv '{0}.tmp' '{0}'\nsleep 12\nexec '{}' \"$@\"\n",
            mark.display(),
            bin("pincer-agent").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut run = Command::new(bin("pincer"))
        .args(oracle_run(
            &tasks,
            &out,
            &["--no-report", "--size", "1024x768"],
        ))
        .env("PINCER_STATE_DIR", sb.path().join("state"))
        .env("PINCER_ENVS", sb.path().join("envs.toml"))
        .env("PINCER_EXE", bins.join("pincer"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(60), || mark.exists()),
        "the desktop's agent never started"
    );
    let said = std::fs::read_to_string(&mark).unwrap();
    let [supervisor, name, display] = said.split_whitespace().collect::<Vec<_>>()[..] else {
        panic!("{said}")
    };
    let desktop = DesktopFootprint::of(&json!({
        "name": name,
        "supervisor_pid": supervisor.parse::<u64>().unwrap(),
        "display": display,
        "agent_addr": "127.0.0.1:0",
    }));
    assert!(
        desktop.processes.iter().any(|p| p.comm == "Xvfb"),
        "{:?}",
        desktop.processes
    );
    run.kill().unwrap();
    run.wait().unwrap();
    let t = Instant::now();
    // Before, the supervisor noticed only once the start was over (the agent ready, 12 s).
    let left = desktop.wait_gone(Duration::from_secs(30));
    let took = t.elapsed();
    println!(
        "desktop gone {:.2} s after its starting run was killed",
        took.as_secs_f64()
    );
    assert!(left.is_empty(), "{left:?}");
    assert!(took < Duration::from_secs(6), "gone only after {took:?}");
}

/// The first decision of each task run of a run, by (task, repeat). (Later ones depend on
/// how the screen reacted, which a random click can make timing-dependent.)
fn first_actions(out: &Path) -> std::collections::BTreeMap<(String, u64), Value> {
    results(out)
        .iter()
        .map(|r| {
            let steps = std::fs::read_to_string(
                out.join(r["trajectory"].as_str().unwrap())
                    .join("steps.jsonl"),
            )
            .unwrap();
            let first = steps.lines().next().expect("a step");
            let actions = serde_json::from_str::<Value>(first).unwrap()["actions"].clone();
            (
                (
                    r["task"].as_str().unwrap().to_owned(),
                    r["repeat"].as_u64().unwrap(),
                ),
                actions,
            )
        })
        .collect()
}

#[test]
fn repeats_use_their_own_seeds_and_runs_are_reproducible_across_sets() {
    let sb = Sandbox::new();
    let tasks = suite(sb.path(), 1, 0);
    let run = |out: &Path, parallel: &str| {
        sb.pincer_ok(&[
            "run",
            "--tasks",
            tasks.to_str().unwrap(),
            "--agent",
            "random",
            "--repeat",
            "3",
            "--seed",
            "11",
            "--parallel",
            parallel,
            "--observe",
            "screenshot",
            "--out",
            out.to_str().unwrap(),
            "--no-report",
            "--size",
            "800x600",
        ])
    };
    let (a, b) = (sb.path().join("a"), sb.path().join("b"));
    run(&a, "1");
    run(&b, "3");
    let recs = results(&a);
    let seeds: Vec<(u64, u64)> = recs
        .iter()
        .map(|r| (r["repeat"].as_u64().unwrap(), r["seed"].as_u64().unwrap()))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(seeds, [(0, 11), (1, 12), (2, 13)]);
    let (first, second) = (first_actions(&a), first_actions(&b));
    assert_eq!(first.len(), 3);
    // The same seed gives the same actions whichever set ran it; seeds differ per repeat.
    assert_eq!(first, second);
    let runs: Vec<&Value> = first.values().collect();
    assert!(runs[0] != runs[1] || runs[1] != runs[2], "{runs:?}");
}

/// A task done and then undone is no success: both files existed at some step (latched
/// completion 2/2), but at the end one is gone again, so the run ends `undone` with the
/// checkpoint named and the final completion counting only what still held.
#[test]
fn a_task_done_and_then_undone_ends_undone() {
    let sb = Sandbox::new();
    let tasks = sb.path().join("undo");
    std::fs::create_dir_all(&tasks).unwrap();
    let kill =
        json!({"do": "exec", "argv": ["pkill", "-s", "0", "-x", "xfce4-terminal"], "check": false});
    let type_in = |text: &str| json!({"do": "type", "text": text, "target": {"role": "terminal"}});
    let t = json!({
        "id": "undo",
        "instruction": "Create ~/u-a.txt and ~/u-b.txt using the terminal.",
        "envs": {"desktop": {"platform": "linux"}},
        "setup": {"desktop": [
            {"do": "remove", "path": "~/u-a.txt"},
            {"do": "remove", "path": "~/u-b.txt"},
            kill,
            {"do": "launch", "argv": ["xfce4-terminal", "--disable-server"]},
            {"do": "wait_window", "title_contains": "Terminal"}
        ]},
        "teardown": {"desktop": [kill]},
        "checkpoints": [
            {"id": "a", "env": "desktop", "check": "file_exists", "args": {"path": "~/u-a.txt"}},
            {"id": "b", "env": "desktop", "check": "file_exists", "args": {"path": "~/u-b.txt"}}
        ],
        "oracle": [
            type_in("touch ~/u-a.txt\n"),
            {"do": "sleep", "ms": 1000},
            type_in("rm ~/u-a.txt; touch ~/u-b.txt\n"),
            {"do": "sleep", "ms": 1000}
        ]
    });
    std::fs::write(tasks.join("undo.json"), t.to_string()).unwrap();
    let out = sb.path().join("out");
    sb.pincer_ok(&oracle_run(&tasks, &out, &["--size", "800x600"]));
    let rec = &results(&out)[0];
    assert_eq!(rec["termination"], "undone", "{rec}");
    assert_eq!(
        (rec["passed"].as_u64(), rec["final_passed"].as_u64()),
        (Some(2), Some(1)),
        "{rec}"
    );
    let detail = rec["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("a: passed at step") && detail.contains("no longer holds"),
        "{detail}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("undone") && report.contains("final CR"),
        "{report}"
    );
}

/// `--end agent` (OSWorld's rule): reaching the goal ends nothing, so what the agent does
/// after it counts; and a task's finalize steps run once the agent has ended, before its
/// final checkpoints are judged once, giving the record a score.
#[test]
fn under_end_agent_the_agent_ends_the_run_and_finalize_runs_before_the_final_check() {
    let sb = Sandbox::new();
    let tasks = sb.path().join("agent-ends");
    std::fs::create_dir_all(&tasks).unwrap();
    let kill =
        json!({"do": "exec", "argv": ["pkill", "-s", "0", "-x", "xfce4-terminal"], "check": false});
    let type_in = |text: &str| json!({"do": "type", "text": text, "target": {"role": "terminal"}});
    let made_then_undone = json!({
        "id": "made-then-undone",
        "instruction": "Create ~/e-a.txt using the terminal.",
        "envs": {"desktop": {"platform": "linux"}},
        "setup": {"desktop": [
            {"do": "remove", "path": "~/e-a.txt"},
            kill,
            {"do": "launch", "argv": ["xfce4-terminal", "--disable-server"]},
            {"do": "wait_window", "title_contains": "Terminal"}
        ]},
        "teardown": {"desktop": [kill]},
        "checkpoints": [
            {"id": "a", "env": "desktop", "check": "file_exists", "args": {"path": "~/e-a.txt"}}
        ],
        "oracle": [
            type_in("touch ~/e-a.txt\n"),
            {"do": "sleep", "ms": 1000},
            type_in("rm ~/e-a.txt\n"),
            {"do": "sleep", "ms": 1000},
            {"do": "complete"}
        ]
    });
    let saved_by_finalize = json!({
        "id": "saved-by-finalize",
        "instruction": "Say you are done.",
        "envs": {"desktop": {"platform": "linux"}},
        "end": "agent",
        "setup": {"desktop": [{"do": "remove", "path": "~/e-saved.txt"}]},
        "finalize": {"desktop": [
            {"do": "write_file", "path": "~/e-saved.txt", "content": "saved"}
        ]},
        "checkpoints": [
            {"id": "saved", "env": "desktop", "check": "file_contains",
             "args": {"path": "~/e-saved.txt", "text": "saved"}, "final": true}
        ],
        "oracle": [{"do": "complete"}]
    });
    std::fs::write(tasks.join("a.json"), made_then_undone.to_string()).unwrap();
    std::fs::write(tasks.join("b.json"), saved_by_finalize.to_string()).unwrap();

    // CRAB's rule: the file appearing ends the run at once, a success.
    let out = sb.path().join("sinks");
    sb.pincer_ok(&oracle_run(
        &tasks,
        &out,
        &["--size", "800x600", "--task", "made-then-undone"],
    ));
    let rec = &results(&out)[0];
    assert_eq!(rec["termination"], "success", "{rec}");
    assert!(
        rec["actions"].as_u64().unwrap() < 4,
        "ended at the goal: {rec}"
    );

    // The agent's rule: the run goes on, the file is removed, and the end state decides.
    let out = sb.path().join("agent");
    sb.pincer_ok(&oracle_run(
        &tasks,
        &out,
        &["--size", "800x600", "--end", "agent"],
    ));
    let recs = results(&out);
    let rec = |id: &str| recs.iter().find(|r| r["task"] == id).unwrap().clone();
    let undone = rec("made-then-undone");
    assert_eq!(undone["termination"], "false-completion", "{undone}");
    let detail = undone["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("the agent said it was done; on the final state a: "),
        "{detail}"
    );
    assert_eq!(
        undone.get("score"),
        None,
        "no final checkpoints, no score: {undone}"
    );
    let saved = rec("saved-by-finalize");
    assert_eq!(saved["termination"], "success", "{saved}");
    assert_eq!(saved["score"].as_f64(), Some(1.0), "{saved}");
    let progress = &saved["progress"][0];
    assert_eq!(
        (progress["final"].as_bool(), progress["checks"].as_u64()),
        (Some(true), Some(1))
    );
    let finalized = std::fs::read_to_string(
        out.join(saved["trajectory"].as_str().unwrap())
            .join("finalize.jsonl"),
    )
    .unwrap();
    let line: Value = serde_json::from_str(finalized.lines().next().unwrap()).unwrap();
    assert_eq!(
        (line["role"].as_str(), line["result"].as_str()),
        (Some("desktop"), Some("ok"))
    );
    let header: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(header["end"], "agent", "{header}");
}
