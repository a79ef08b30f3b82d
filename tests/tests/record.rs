//! `pincer record`: a demonstration on a real desktop, given through XTest (the input a
//! person would give), recorded from the guest's XInput2 events and video as a task run
//! whose steps are agent actions labelled with the UI node under the pointer; its replay
//! reaches the same end state and checkpoints. Recordings without a task, and refusals.

use pincer_tests::Sandbox;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A zenity entry whose answer lands in ~/name.txt: done when it holds "pincer".
fn zenity_task(dir: &Path) -> std::path::PathBuf {
    let task = json!({
        "id": "zen",
        "instruction": "Type pincer into the dialog and press OK.",
        "envs": {"desktop": {"platform": "linux"}},
        "setup": {"desktop": [
            {"do": "remove", "path": "~/name.txt"},
            {"do": "launch", "argv": ["sh", "-c", "zenity --entry --title 'pincer rec' --text 'Your name:' > ~/name.txt"]},
            {"do": "wait_window", "title_contains": "pincer rec", "timeout_ms": 60000}
        ]},
        "teardown": {"desktop": [{"do": "window", "title_contains": "pincer rec", "op": "close"}]},
        "checkpoints": [{"id": "written", "env": "desktop", "check": "file_contains", "args": {"path": "~/name.txt", "text": "pincer"}}],
        "limits": {"max_steps": 50, "max_seconds": 120}
    });
    let path = dir.join("zen.json");
    std::fs::write(&path, task.to_string()).unwrap();
    path
}

/// The centre of the first `role "name"` line of the desktop's tree as text.
fn centre(sb: &Sandbox, env: &str, wanted: &str) -> (i32, i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tree = sb.pincer_ok(&["tree", "--env", env, "--format", "text"]);
        let found = tree
            .lines()
            .map(str::trim)
            .find(|l| l.starts_with(wanted))
            .and_then(|l| {
                let (at, size) = l.rsplit_once('@')?.1.split_once(' ')?;
                let (x, y) = at.split_once(',')?;
                let (w, h) = size.split_once('x')?;
                let n = |s: &str| s.parse::<i32>().ok();
                Some((n(x)? + n(w)? / 2, n(y)? + n(h)? / 2))
            });
        if let Some(c) = found {
            return c;
        }
        assert!(Instant::now() < deadline, "no {wanted} in\n{tree}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts `pincer record ARGS` and waits until it says to begin.
fn start_recording(sb: &Sandbox, args: &[&str]) -> std::process::Child {
    let mut child = sb
        .pincer_command(&[&["record"], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "record ended early:\n{said}"
        );
        said.push_str(&line);
        if line.contains("work on the task now") {
            break;
        }
    }
    // Keep draining stderr so the recorder never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    child
}

fn steps(traj: &Path) -> Vec<Value> {
    std::fs::read_to_string(traj.join("steps.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_xtest_demonstration_is_recorded_as_labelled_actions_and_replays_to_the_same_end() {
    let sb = Sandbox::new();
    let d = sb.desktop("rec", "1280x800", &[]);
    let task = zenity_task(sb.path());
    let out = sb.path().join("rec");
    let child = start_recording(
        &sb,
        &[
            "--env",
            &d.name,
            "-o",
            out.to_str().unwrap(),
            "--tasks",
            task.to_str().unwrap(),
            "--task",
            "zen",
            "--seconds",
            "90",
        ],
    );
    // The "person": real XTest input through the action class.
    let (ex, ey) = centre(&sb, &d.name, "text \"\"");
    let (ox, oy) = centre(&sb, &d.name, "push button \"OK\"");
    sb.pincer_ok(&[
        "act",
        "--env",
        &d.name,
        "click",
        &ex.to_string(),
        &ey.to_string(),
    ]);
    std::thread::sleep(Duration::from_millis(400));
    sb.pincer_ok(&["act", "--env", &d.name, "type", "pincer"]);
    std::thread::sleep(Duration::from_millis(400));
    sb.pincer_ok(&[
        "act",
        "--env",
        &d.name,
        "click",
        &ox.to_string(),
        &oy.to_string(),
    ]);
    // The task is done: the recording ends by itself.
    let done = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{stdout}");
    assert!(stdout.contains("recorded 3 actions"), "{stdout}");
    assert!(stdout.contains("success (1/1 checkpoints)"), "{stdout}");

    let traj = out.join("tasks/zen__r0");
    let s = steps(&traj);
    let actions: Vec<&Value> = s.iter().map(|s| &s["actions"][0]).collect();
    assert_eq!(
        actions[0],
        &json!({"action": "click", "env": "desktop", "target": {"x": ex, "y": ey}})
    );
    assert_eq!(actions[1]["text"], "pincer");
    assert_eq!(actions[2]["target"], json!({"x": ox, "y": oy}));
    // Each action is labelled with the node under the pointer, and has the frame before it.
    assert_eq!(s[0]["thought"], "on text in dialog \"pincer rec\"");
    assert!(
        s[2]["thought"]
            .as_str()
            .unwrap()
            .contains("\"OK\" in dialog \"pincer rec\""),
        "{}",
        s[2]["thought"]
    );
    for step in &s {
        let file = step["images"][0]["file"].as_str().unwrap();
        assert!(
            std::fs::read(traj.join(file))
                .unwrap()
                .starts_with(&[0xff, 0xd8]),
            "{file}"
        );
    }
    assert_eq!(s[2]["passed"], json!(["written"]));
    let rec: Value = serde_json::from_str(
        std::fs::read_to_string(out.join("results.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let end = rec["final_images"][0]["file"]
        .as_str()
        .expect("the state it ended in");
    assert!(traj.join(end).is_file(), "{end}");
    let probe = std::process::Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(traj.join("video.mp4"))
        .output()
        .unwrap();
    let frames: u32 = String::from_utf8_lossy(&probe.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(frames >= 2, "{frames}");

    // The recording replays to the same end state and the same checkpoints.
    let again = sb.path().join("again");
    let replayed = sb.pincer_ok(&[
        "replay",
        traj.to_str().unwrap(),
        "--env",
        &d.name,
        "--out",
        again.to_str().unwrap(),
    ]);
    let cmp: Value =
        serde_json::from_str(&std::fs::read_to_string(again.join("replay.json")).unwrap()).unwrap();
    assert_eq!(cmp["reproduced"], true, "{replayed}");
    assert_eq!(cmp["replayed"]["termination"], "success");
    // The checkpoint passes at the same step, or (the file written a moment later under
    // load) a step later: timing, not a divergence.
    assert_eq!(cmp["replayed"]["passed"], 1);
    assert_eq!(cmp["first_divergence"], Value::Null);

    // The oracle candidate: the unnamed entry by its point, the OK button by selector; as
    // the task's oracle it solves the task.
    let oracle: Value =
        serde_json::from_str(&std::fs::read_to_string(traj.join("oracle.json")).unwrap()).unwrap();
    assert_eq!(
        oracle[0],
        json!({"do": "click", "target": {"x": ex, "y": ey}})
    );
    assert_eq!(oracle[1], json!({"do": "type", "text": "pincer"}));
    assert_eq!(oracle[2]["target"]["name"], "OK", "{oracle}");
    assert_eq!(
        oracle[2]["target"]["inside"]["name"], "pincer rec",
        "{oracle}"
    );
    let mut with_oracle: Value =
        serde_json::from_str(&std::fs::read_to_string(&task).unwrap()).unwrap();
    with_oracle["oracle"] = oracle;
    std::fs::write(&task, with_oracle.to_string()).unwrap();
    let solved = sb.path().join("solved");
    sb.pincer_ok(&[
        "run",
        "--tasks",
        task.to_str().unwrap(),
        "--agent",
        "oracle",
        "--set",
        &format!("desktop={}", d.name),
        "--no-report",
        "--out",
        solved.to_str().unwrap(),
    ]);
    let results = std::fs::read_to_string(solved.join("results.jsonl")).unwrap();
    assert!(results.contains("\"termination\":\"success\""), "{results}");
}

#[test]
fn a_recording_without_a_task_ends_when_its_time_is_up_and_refusals_are_named() {
    let sb = Sandbox::new();
    let d = sb.desktop("rec-open", "800x600", &[]);
    let out = sb.path().join("open");
    let child = start_recording(
        &sb,
        &[
            "--env",
            &d.name,
            "-o",
            out.to_str().unwrap(),
            "--seconds",
            "3",
            "--instruction",
            "try keys",
        ],
    );
    sb.pincer_ok(&["act", "--env", &d.name, "key", "ctrl+shift+a"]);
    sb.pincer_ok(&["act", "--env", &d.name, "scroll", "0", "2"]);
    let done = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{stdout}");
    let s = steps(&out.join("tasks/recording__r0"));
    let actions: Vec<&Value> = s.iter().map(|s| &s["actions"][0]).collect();
    assert_eq!(
        actions[0]["keys"],
        json!(["ctrl", "shift", "a"]),
        "{actions:?}"
    );
    assert_eq!(
        (actions[1]["action"].as_str(), actions[1]["dy"].as_i64()),
        (Some("scroll"), Some(2))
    );
    assert_eq!(
        actions.last().unwrap()["action"],
        "submit",
        "the end of the recording"
    );
    let tasks = std::fs::read_to_string(out.join("tasks.json")).unwrap();
    assert!(tasks.contains("try keys"), "{tasks}");

    // Into a used directory, at an absurd rate, a task with two roles: refused by name.
    let e = sb.pincer(&[
        "record",
        "--env",
        &d.name,
        "-o",
        out.to_str().unwrap(),
        "--seconds",
        "1",
    ]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("already holds results"));
    let e = sb.pincer(&["record", "--env", &d.name, "-o", "x", "--fps", "500"]);
    assert!(String::from_utf8_lossy(&e.stderr).contains("--fps 500: give 1 to 60"));
    let e = sb.pincer(&[
        "record",
        "--env",
        &d.name,
        "-o",
        "y",
        "--tasks",
        "demo",
        "--task",
        "cross-copy-access-code",
    ]);
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("a recording takes a task with one"), "{e}");
}
