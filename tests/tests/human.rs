//! Human validation on real local desktops: a person works on a desktop while the runner
//! evaluates continuously and prints checkpoint progress; typing `answer TEXT` submits an
//! answer and `infeasible` gives up.
//! The "person" here is the test itself, acting on the desktop through `pincer exec`, as
//! someone at a VNC viewer would through the screen. And `pincer desktop vnc` serves a
//! desktop to that person.

use pincer_tests::{ProcessEntry, Sandbox, bin, processes, results};
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

/// `pincer run --agent human` in a sandbox, with the test as the person: it reads what the
/// run prints for the person and types lines on its terminal.
struct Person {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    /// Everything printed so far.
    seen: String,
    /// Where the next wait starts looking.
    at: usize,
}

impl Person {
    /// Starts `pincer run ARGS --agent human --no-report --out OUT`.
    fn start(sb: &Sandbox, args: &[&str], out: &Path) -> Self {
        let mut child = sb
            .pincer_command(&["run", "--agent", "human", "--no-report", "--out"])
            .arg(out)
            .args(args)
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
        Self {
            child,
            lines,
            seen: String::new(),
            at: 0,
        }
    }

    /// Waits until the run prints `needle` after what the last wait found.
    fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(i) = self.seen[self.at..].find(needle) {
                self.at += i + needle.len();
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push_str(&l);
                    self.seen.push('\n');
                }
                Err(_) => panic!("no '{needle}' in the output:\n{}", self.seen),
            }
        }
    }

    /// Types a line on the run's terminal.
    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// Waits for the run to end; it must succeed.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push_str(&l);
            self.seen.push('\n');
        }
        assert!(status.success(), "{status}:\n{}", self.seen);
    }
}

/// (task, termination) of each record.
fn ends(recs: &[Value]) -> Vec<(String, String)> {
    recs.iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap().to_owned(),
                r["termination"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_person_solves_one_task_and_gives_up_on_another() {
    let sb = Sandbox::new();
    let _desk = sb.desktop("person", "1024x768", &[]);
    let tasks = sb.path().join("tasks");
    write_tasks(&tasks);
    let out = sb.path().join("out");
    let mut person = Person::start(
        &sb,
        &[
            "--tasks",
            tasks.to_str().unwrap(),
            "--set",
            "desktop=person",
        ],
        &out,
    );
    // Tasks run in id order. A mistyped answer is explained, not taken; the right one is.
    person.wait_for("=== task ask ===");
    person.wait_for("`answer TEXT`");
    person.say("answer");
    person.wait_for("`answer` needs the answer after it");
    person.say("answer 366");
    // The person is told where to work.
    person.wait_for("=== task by-hand ===");
    person.wait_for("environment 'person'");
    person.wait_for("progress: 0/2 checkpoints");
    // The person's hands: a shell command on the desktop.
    let work = |script: &str| sb.pincer_ok(&["exec", "--env", "person", "--", "sh", "-c", script]);
    // Half the work: the file exists, without the words yet.
    work("touch \"$HOME/by-hand.txt\"");
    person.wait_for("checkpoint passed: file");
    person.wait_for("progress: 1/2 checkpoints");
    work("echo made by hand > \"$HOME/by-hand.txt\"");
    // The graph is complete, so the task ends on its own; the next one asks the person.
    person.wait_for("2/2 checkpoints");
    person.wait_for("=== task give-up ===");
    person.say("infeasible the words will not fit");
    person.finish();
    let recs = results(&out);
    assert_eq!(
        ends(&recs),
        [
            ("ask".to_owned(), "success".to_owned()),
            ("by-hand".to_owned(), "success".to_owned()),
            ("give-up".to_owned(), "infeasible".to_owned())
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

/// The environment each role of the demo suite is bound to in these tests.
fn person_env(role: &str) -> String {
    match role {
        "desktop" => "hand".into(),
        "desktop2" => "hand2".into(),
        other => panic!("no environment for role {other}"),
    }
}

#[test]
fn a_person_solves_every_demo_task_by_a_route_of_their_own() {
    let sb = Sandbox::new();
    let _desk = sb.desktop("hand", "1024x768", &[]);
    let _desk2 = sb.desktop("hand2", "1024x768", &[]);
    let out = sb.path().join("out");
    let mut person = Person::start(
        &sb,
        &["--tasks", "demo", "--set", "desktop=hand,desktop2=hand2"],
        &out,
    );
    let mut routes = pincer_tests::routes::demo();
    routes.sort_by_key(|r| r.task);
    for route in &routes {
        person.wait_for(&format!("=== task {} ===", route.task));
        // Set up and checked: the person is shown the checkpoints and may start.
        person.wait_for("progress: 0/");
        route.perform(&sb, &person_env);
        if let Some(answer) = route.answer {
            person.say(&format!("answer {answer}"));
        }
    }
    person.finish();
    let got = ends(&results(&out));
    let want: Vec<(String, String)> = routes
        .iter()
        .map(|r| (r.task.to_owned(), "success".to_owned()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_task_solved_and_then_undone_by_a_person_is_not_a_success() {
    let sb = Sandbox::new();
    let _desk = sb.desktop("undo", "1024x768", &[]);
    let out = sb.path().join("out");
    let mut person = Person::start(
        &sb,
        &[
            "--tasks",
            "demo",
            "--task",
            "files-archive-report",
            "--task",
            "settings-left-handed-mouse",
            "--set",
            "desktop=undo",
        ],
        &out,
    );
    let work = |script: &str| sb.pincer_ok(&["exec", "--env", "undo", "--", "sh", "-c", script]);
    // The report moved into the archive (with a stray file beside it, so the task is not
    // complete yet), then moved back, leaving a copy in the archive.
    person.wait_for("=== task files-archive-report ===");
    person.wait_for("progress: 0/");
    work("mv ~/inbox/report-draft.txt ~/archive/report-final.txt && touch ~/archive/stray");
    person.wait_for("checkpoint passed: inbox-exact");
    work("cp ~/archive/report-final.txt ~/inbox/report-draft.txt && rm ~/archive/stray");
    // Left-handed set, then unset while the double-click time is set.
    person.wait_for("=== task settings-left-handed-mouse ===");
    person.wait_for("progress: 0/");
    work("gsettings set org.gnome.desktop.peripherals.mouse left-handed true");
    person.wait_for("checkpoint passed: left-handed");
    work(
        "gsettings set org.gnome.desktop.peripherals.mouse left-handed false && gsettings set org.gnome.desktop.peripherals.mouse double-click 600",
    );
    person.finish();
    let recs = results(&out);
    assert_eq!(
        ends(&recs),
        [
            ("files-archive-report".to_owned(), "undone".to_owned()),
            ("settings-left-handed-mouse".to_owned(), "undone".to_owned())
        ]
    );
    // Each names what no longer holds; every checkpoint passed once, not all at the end.
    for (rec, undone) in recs.iter().zip(["inbox-exact", "left-handed"]) {
        let detail = rec["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(undone), "{rec}");
        assert_eq!(rec["passed"], rec["total"], "{rec}");
        assert!(
            rec["final_passed"].as_u64() < rec["total"].as_u64(),
            "{rec}"
        );
    }
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
