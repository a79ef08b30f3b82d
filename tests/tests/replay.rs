//! `pincer replay`: a recorded task run made again on real local desktops, compared step by
//! step with its recording (checkpoints, screens, ending); a changed recording diverges
//! where it changed; what is not a trajectory is refused.

use pincer_tests::Sandbox;
use serde_json::Value;
use std::path::Path;

/// The oracle's run of calculator-multiply (nine clicks, then the answer) in `out`.
fn record(sb: &Sandbox, out: &Path) {
    sb.pincer_ok(&[
        "run",
        "--tasks",
        "demo",
        "--task",
        "calculator-multiply",
        "--agent",
        "oracle",
        "--size",
        "1280x800",
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ]);
}

fn replay_json(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("replay.json")).unwrap()).unwrap()
}

#[test]
fn a_trajectory_replays_to_the_same_checkpoints_and_screens() {
    let sb = Sandbox::new();
    let run = sb.path().join("run");
    record(&sb, &run);
    // The replay on a desktop of the envs file, by name.
    let d = sb.desktop("replay-here", "1280x800", &[]);
    let again = sb.path().join("again");
    let stdout = sb.pincer_ok(&[
        "replay",
        run.join("tasks/calculator-multiply__r0").to_str().unwrap(),
        "--env",
        &d.name,
        "--out",
        again.to_str().unwrap(),
    ]);
    assert!(
        stdout.contains("the replay reproduces the recording"),
        "{stdout}"
    );
    let cmp = replay_json(&again);
    assert_eq!(cmp["reproduced"], true);
    assert_eq!(cmp["first_divergence"], Value::Null);
    assert_eq!(cmp["replayed"]["termination"], "success");
    let steps = cmp["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 9);
    for s in steps {
        // A checkpoint may pass a step apart under load (timing); it never diverges.
        assert_eq!(s["diverges"], false, "{s}");
        let (_, d) = serde_json::from_value::<(String, f64)>(s["screen_difference"][0].clone())
            .expect("each step's screens compared");
        assert!(d < 0.05, "step {} looks different: {d}", s["step"]);
    }
    assert_eq!(steps[7]["recorded_passed"][0], "shown");
    // The states both runs ended in look the same.
    let end = cmp["final_difference"][0][1]
        .as_f64()
        .expect("the final screens compared");
    assert!(end < 0.05, "{end}");
    // The replay is a run of its own, with its own record and trajectory.
    let results = std::fs::read_to_string(again.join("results.jsonl")).unwrap();
    assert!(results.contains("\"agent\":\"replay\""), "{results}");
    // Into a used directory: refused before anything starts.
    let out = sb.pincer(&[
        "replay",
        run.join("tasks/calculator-multiply__r0").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("already holds results"),
        "{e}"
    );
    assert!(!e.contains("starting local desktops"), "{e}");
}

#[test]
fn a_changed_recording_diverges_where_it_changed() {
    let sb = Sandbox::new();
    let run = sb.path().join("run");
    record(&sb, &run);
    // The third digit clicked is the first one again: the product is another number.
    let traj = run.join("tasks/calculator-multiply__r0");
    let path = traj.join("steps.jsonl");
    let mut lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let first = lines[0]["actions"][0]["target"].clone();
    lines[2]["actions"][0]["target"] = first;
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();

    let again = sb.path().join("again");
    let stdout = sb.pincer_ok(&[
        "replay",
        traj.to_str().unwrap(),
        "--size",
        "1280x800",
        "--out",
        again.to_str().unwrap(),
    ]);
    let cmp = replay_json(&again);
    assert_eq!(cmp["reproduced"], false, "{stdout}");
    // The display is checked when '=' is pressed (step 8): it shows another number.
    assert_eq!(cmp["first_divergence"], 8, "{stdout}");
    assert!(stdout.contains("the replay diverges at step 8"), "{stdout}");
    assert_ne!(cmp["replayed"]["termination"], "success");
    // Until the change, the screens agree.
    let d = cmp["steps"][1]["screen_difference"][0][1].as_f64().unwrap();
    assert!(d < 0.05, "{d}");
}

#[test]
fn what_is_not_a_replayable_trajectory_is_refused() {
    let sb = Sandbox::new();
    let empty = sb.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = sb.pincer(&["replay", empty.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(e.contains("not a trajectory (no steps.jsonl)"), "{e}");
    // Steps without the run around them (no tasks.json).
    let lone = sb.path().join("lone/tasks/t__r0");
    std::fs::create_dir_all(&lone).unwrap();
    std::fs::write(lone.join("steps.jsonl"), "").unwrap();
    let out = sb.pincer(&["replay", lone.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(e.contains("tasks.json"), "{e}");
    // A task with two roles cannot take --env.
    std::fs::write(
        sb.path().join("lone/tasks.json"),
        r#"[{"id": "t", "instruction": "x", "envs": {"a": {"platform": "linux"}, "b": {"platform": "linux"}},
            "checkpoints": [{"id": "c", "env": "a", "check": "file_exists", "args": {"path": "/x"}}]}]"#,
    )
    .unwrap();
    let out = sb.pincer(&["replay", lone.to_str().unwrap(), "--env", "somewhere"]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(e.contains("has roles a, b: give --set"), "{e}");
}
