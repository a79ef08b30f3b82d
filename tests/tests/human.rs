//! Human validation on real local desktops: a person works on a desktop while the runner
//! evaluates continuously and prints checkpoint progress; typing `answer TEXT` submits an
//! answer and `infeasible` gives up.
//! The "person" here is the test itself, acting on the desktop through `pincer exec`, as
//! someone at a VNC viewer would through the screen. And `pincer desktop vnc` serves a
//! desktop to that person.

use pincer_tests::{ProcessEntry, Sandbox, bin, processes};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn write_tasks(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let task = |id: &str| {
        json!({
            "id": id,
            "instruction": format!("Write the words 'made by hand' into ~/{id}.txt, then type done."),
            "envs": {"desktop": {"platform": "linux"}},
            "setup": {"desktop": [{"do": "remove", "path": format!("~/{id}.txt")}]},
            "checkpoints": [
                {"id": "file", "env": "desktop", "check": "file_exists", "args": {"path": format!("~/{id}.txt")}},
                {"id": "words", "env": "desktop", "check": "file_contains", "after": ["file"],
                 "args": {"path": format!("~/{id}.txt"), "text": "made by hand"}}
            ],
            "limits": {"max_steps": 1000, "max_seconds": 120}
        })
    };
    for id in ["by-hand", "give-up"] {
        std::fs::write(
            dir.join(format!("{id}.json")),
            serde_json::to_string(&task(id)).unwrap(),
        )
        .unwrap();
    }
    // A question, answered on the terminal (tasks run in id order: this one first).
    let ask = json!({
        "id": "ask",
        "instruction": "How many days has a leap year? Answer with the number.",
        "envs": {"desktop": {"platform": "linux"}},
        "checkpoints": [{"id": "answer", "check": "answer", "args": {"text": {"equals": "366"}}}],
        "limits": {"max_steps": 1000, "max_seconds": 120}
    });
    std::fs::write(dir.join("ask.json"), ask.to_string()).unwrap();
}

/// Waits for a line containing `needle` on the channel, returning everything read.
fn wait_for(lines: &mpsc::Receiver<String>, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
            }
            Err(_) => panic!("no '{needle}' in the output:\n{seen}"),
        }
    }
}

#[test]
fn a_person_solves_one_task_and_gives_up_on_another() {
    let sb = Sandbox::new();
    let _desk = sb.desktop("person", "1024x768", &[]);
    let tasks = sb.path().join("tasks");
    write_tasks(&tasks);
    let out = sb.path().join("out");
    let mut child = Command::new(bin("pincer"))
        .args([
            "run",
            "--tasks",
            tasks.to_str().unwrap(),
            "--agent",
            "human",
        ])
        .args(["--set", "desktop=person", "--no-report", "--out"])
        .arg(&out)
        .env("PINCER_STATE_DIR", sb.path().join("state"))
        .env("PINCER_ENVS", sb.path().join("envs.toml"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut seen = String::new();
    let mut say = |line: &[u8]| child.stdin.as_mut().unwrap().write_all(line).unwrap();
    // Tasks run in id order. A mistyped answer is explained, not taken; the right one is.
    wait_for(&lines, &mut seen, "=== task ask ===");
    wait_for(&lines, &mut seen, "`answer TEXT`");
    say(b"answer\n");
    wait_for(&lines, &mut seen, "`answer` needs the answer after it");
    say(b"answer 366\n");
    // The person is told where to work.
    wait_for(&lines, &mut seen, "=== task by-hand ===");
    wait_for(&lines, &mut seen, "environment 'person'");
    wait_for(&lines, &mut seen, "progress: 0/2 checkpoints");
    // The person's hands: a shell command on the desktop.
    let work = |script: &str| sb.pincer_ok(&["exec", "--env", "person", "--", "sh", "-c", script]);
    // Half the work: the file exists, without the words yet.
    work("touch \"$HOME/by-hand.txt\"");
    wait_for(&lines, &mut seen, "checkpoint passed: file");
    wait_for(&lines, &mut seen, "progress: 1/2 checkpoints");
    work("echo made by hand > \"$HOME/by-hand.txt\"");
    // The graph is complete, so the task ends on its own; the next one asks the person.
    wait_for(&lines, &mut seen, "2/2 checkpoints");
    wait_for(&lines, &mut seen, "=== task give-up ===");
    say(b"infeasible the words will not fit\n");
    let status = child.wait().unwrap();
    assert!(status.success(), "{seen}");
    let recs: Vec<Value> = std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ends: Vec<(&str, &str)> = recs
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap(),
                r["termination"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("ask", "success"),
            ("by-hand", "success"),
            ("give-up", "infeasible")
        ]
    );
    assert!(
        recs[2]["detail"]
            .as_str()
            .unwrap()
            .contains("the words will not fit"),
        "{:?}",
        recs[2]
    );
    // The person's progress was recorded over time: `file` passed before `words`.
    let progress = &recs[1]["progress"];
    let at = |id: &str| {
        progress
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .and_then(|p| p["passed_ms"].as_u64())
            .unwrap_or_else(|| panic!("{id} has no passed_ms: {progress}"))
    };
    assert!(at("file") < at("words"), "{progress}");
}

#[test]
fn a_desktop_is_served_over_vnc_with_a_password() {
    let sb = Sandbox::new();
    let _desk = sb.desktop("watched", "800x600", &[]);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Command::new(bin("pincer"))
        .args(["desktop", "vnc", "watched", "--port", &port.to_string()])
        .env("PINCER_STATE_DIR", sb.path().join("state"))
        .env("PINCER_ENVS", sb.path().join("envs.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kept open to the end: pincer prints more, and a closed pipe would end it (SIGPIPE).
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(
        first.contains(&format!("127.0.0.1:{port}")) && first.contains("password "),
        "{first}"
    );
    // A VNC server speaks first: the RFB version, then (3.8) the security types on offer,
    // which must not include "None" (1): a password is required.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut conn = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(c) => break c,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("no VNC server on {port}: {e}"),
        }
    };
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut banner = [0u8; 12];
    conn.read_exact(&mut banner).unwrap();
    assert!(banner.starts_with(b"RFB 003."), "{banner:?}");
    conn.write_all(b"RFB 003.008\n").unwrap();
    let mut n = [0u8; 1];
    conn.read_exact(&mut n).unwrap();
    let mut types = vec![0u8; usize::from(n[0])];
    conn.read_exact(&mut types).unwrap();
    assert!(!types.is_empty(), "the server refused the connection");
    assert!(types.contains(&2), "VNC authentication on offer: {types:?}");
    assert!(!types.contains(&1), "no password-less access: {types:?}");
    // The password is in no command line (anyone can read those) and in a file only its
    // owner can read.
    let password = first
        .split("password ")
        .nth(1)
        .and_then(|rest| rest.split([',', ' ', '\n']).next())
        .unwrap()
        .to_owned();
    let x11vnc = processes()
        .into_iter()
        .find(|p| p.ppid == child.id() && p.comm == "x11vnc")
        .expect("x11vnc runs under pincer");
    assert!(
        !x11vnc.cmdline.contains(&password),
        "password in argv: {}",
        x11vnc.cmdline
    );
    let passwd_file = sb.path().join("state/desktops/watched/vnc.passwd");
    let mode = std::fs::metadata(&passwd_file)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{}", passwd_file.display());
    // A plain `kill` stops x11vnc too, and the password goes with it.
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(
        !passwd_file.exists(),
        "the password file outlived the session"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while ProcessEntry::alive(x11vnc.pid) {
        assert!(
            Instant::now() < deadline,
            "x11vnc outlived `pincer desktop vnc`"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
