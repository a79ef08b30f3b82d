//! API tools end to end: real Radicale and dovecot started by the test as user nobody, task
//! files declaring tools that write into them, `pincer run --tools` on a local desktop
//! started with `--allow-tools`, and the services queried for real afterwards (a CalDAV
//! REPORT, an IMAP FETCH). Also: the sandbox keeps tools off the network and away from
//! paths it was not given, and guests without the opt-in or read-only refuse.

use pincer::env::ClientError;
use pincer_shared::setup::ExitStatus;
use pincer_shared::tool::{Sandbox as ToolSandbox, ToolCall, ToolSpec, ToolValue};
use pincer_shared::{RequestClass, WireError};
use pincer_tests::Sandbox;
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A command run as user nobody when the test runs as root (services and their files
/// then belong to the user tools run as), else as the test's user.
fn as_nobody(program: &str) -> Command {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            program,
        ]);
        c
    } else {
        Command::new(program)
    }
}

/// A directory anyone may write (the tools' user, the services' user).
fn open_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    p.to_owned()
}

/// Lets other users (the services', the tools') through `dir` to what is opened below it.
fn traversable(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Radicale CalDAV server on loopback with one calendar, `alice/cal`.
struct Radicale {
    child: Child,
    port: u16,
    /// The calendar's directory in Radicale's file system storage.
    calendar: PathBuf,
}

impl Radicale {
    fn start(dir: &Path) -> Self {
        traversable(dir);
        let store = open_dir(&dir.join("radicale"));
        let port = free_port();
        let child = as_nobody("/usr/bin/radicale")
            .args(["--config", ""])
            .args(["--server-hosts", &format!("127.0.0.1:{port}")])
            .args(["--storage-filesystem-folder", store.to_str().unwrap()])
            .args(["--auth-type", "none"])
            .env_clear()
            .env("HOME", &store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("radicale (Debian package radicale)");
        let r = Self {
            child,
            port,
            calendar: store.join("collection-root/alice/cal"),
        };
        let started = Instant::now();
        loop {
            let code = curl(&[
                "-u",
                "alice:x",
                "-X",
                "MKCALENDAR",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                &r.url(),
            ]);
            if code == "201" {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "radicale did not start: {code}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        r
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/alice/cal/", self.port)
    }

    /// The calendar's events as a CalDAV client sees them (a calendar-query REPORT).
    fn events(&self) -> String {
        let argv = report_argv(&self.url());
        let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        curl(&args)
    }
}

impl Drop for Radicale {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// curl ARGS → its stdout.
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl").arg("-sS").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The curl command line of a CalDAV calendar-query REPORT on `url`.
fn report_argv(url: &str) -> Vec<String> {
    let query = r#"<?xml version="1.0"?><c:calendar-query xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:caldav"><d:prop><c:calendar-data/></d:prop><c:filter><c:comp-filter name="VCALENDAR"><c:comp-filter name="VEVENT"/></c:comp-filter></c:filter></c:calendar-query>"#;
    [
        "curl",
        "-sS",
        "-u",
        "alice:x",
        "-X",
        "REPORT",
        "-H",
        "Depth: 1",
        "-H",
        "Content-Type: application/xml",
        "--data",
        query,
        url,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// A Maildir, and what dovecot's IMAP server says of its inbox.
fn maildir(dir: &Path) -> PathBuf {
    traversable(dir);
    let m = open_dir(&dir.join("Maildir"));
    for d in ["new", "cur", "tmp"] {
        open_dir(&m.join(d));
    }
    m
}

/// The subjects and senders of every message in the Maildir's inbox, fetched over IMAP
/// from dovecot's IMAP server (run as nobody, pre-authenticated, on its stdin and stdout).
fn imap_headers(maildir: &Path) -> String {
    let mut child = as_nobody("/usr/lib/dovecot/imap")
        .args(["-c", "/dev/null"])
        .env_clear()
        .env("USER", "nobody")
        .env("HOME", maildir.parent().unwrap())
        .env("MAIL", format!("maildir:{}", maildir.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dovecot's imap (Debian package dovecot-imapd)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"a SELECT INBOX\r\nb FETCH 1:* BODY.PEEK[HEADER.FIELDS (SUBJECT TO)]\r\nc LOGOUT\r\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("b OK"), "IMAP FETCH failed: {said}");
    said
}

const ADD_EVENT: &str = r#"
import os, sys, uuid
title, date, hour, calendar = sys.argv[1:5]
day = date.replace('-', '')
if len(day) != 8 or not day.isdigit():
    sys.exit('date must be YYYY-MM-DD, got %r' % date)
uid = uuid.uuid4().hex
ics = '\r\n'.join(['BEGIN:VCALENDAR', 'VERSION:2.0', 'PRODID:-//pincer//add_event//EN',
    'BEGIN:VEVENT', 'UID:' + uid, 'DTSTAMP:20260101T000000Z',
    'DTSTART:%sT%02d0000' % (day, int(hour)), 'DURATION:PT1H', 'SUMMARY:' + title,
    'END:VEVENT', 'END:VCALENDAR', ''])
tmp = os.path.join(calendar, '.tmp-' + uid)
with open(tmp, 'w', newline='') as f:
    f.write(ics)
os.replace(tmp, os.path.join(calendar, uid + '.ics'))
print('created event ' + uid)
"#;

const SEND_MAIL: &str = r#"
import os, sys, time, uuid
to, subject, body, maildir = sys.argv[1:5]
name = '%d.%s.pincer' % (time.time(), uuid.uuid4().hex)
msg = 'From: agent@example.org\r\nTo: %s\r\nSubject: %s\r\n\r\n%s\r\n' % (to, subject, body.replace('\n', '\r\n'))
with open(os.path.join(maildir, 'tmp', name), 'w', newline='') as f:
    f.write(msg)
os.rename(os.path.join(maildir, 'tmp', name), os.path.join(maildir, 'new', name))
print('delivered to ' + to)
"#;

/// The task's `add_event` tool: writes an event into Radicale's calendar directory.
fn add_event(calendar: &Path) -> Value {
    let c = calendar.display().to_string();
    json!({
        "name": "add_event",
        "description": "Adds a one-hour event to the user's calendar.",
        "params": [
            {"name": "title", "type": "string", "required": true, "max_len": 80, "charset": " -.,'", "description": "the event's title"},
            {"name": "date", "type": "string", "required": true, "max_len": 10, "charset": "-", "description": "YYYY-MM-DD"},
            {"name": "hour", "type": "integer", "required": true, "min": 0, "max": 23, "description": "start hour, 0-23"}
        ],
        "argv": ["/usr/bin/python3", "-I", "-c", ADD_EVENT.replace('{', "{{").replace('}', "}}"), "{title}", "{date}", "{hour}", c],
        "sandbox": {"write": [c]}
    })
}

/// The task's `send_mail` tool: delivers a message into the Maildir dovecot serves.
fn send_mail(maildir: &Path) -> Value {
    let m = maildir.display().to_string();
    json!({
        "name": "send_mail",
        "description": "Sends an e-mail.",
        "params": [
            {"name": "to", "type": "string", "required": true, "max_len": 100, "charset": "@.-_"},
            {"name": "subject", "type": "string", "required": true, "max_len": 100, "charset": " -.,'!?"},
            {"name": "body", "type": "string", "required": true, "max_len": 2000}
        ],
        "argv": ["/usr/bin/python3", "-I", "-c", SEND_MAIL.replace('{', "{{").replace('}', "}}"), "{to}", "{subject}", "{body}", m],
        "sandbox": {"write": [m]}
    })
}

/// Writes a task file and returns its path.
fn task_file(dir: &Path, task: &Value) -> PathBuf {
    let p = dir.join(format!("{}.json", task["id"].as_str().unwrap()));
    std::fs::write(&p, serde_json::to_string_pretty(task).unwrap()).unwrap();
    p
}

/// `pincer run --agent oracle` on one task file; the record and the steps' results.
fn oracle_run(sb: &Sandbox, task: &Path, extra: &[&str]) -> (Value, Vec<Value>) {
    let out = sb.path().join(format!(
        "run-{}",
        task.file_stem().unwrap().to_str().unwrap()
    ));
    let mut args = vec![
        "run",
        "--tasks",
        task.to_str().unwrap(),
        "--agent",
        "oracle",
        "--size",
        "800x600",
        "--no-report",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let _ = sb.pincer(&args);
    let record: Value = serde_json::from_str(
        std::fs::read_to_string(out.join("results.jsonl"))
            .expect("a record")
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let steps = std::fs::read_to_string(
        out.join(record["trajectory"].as_str().unwrap())
            .join("steps.jsonl"),
    )
    .unwrap()
    .lines()
    .map(|l| serde_json::from_str(l).unwrap())
    .collect();
    (record, steps)
}

fn results(steps: &[Value]) -> Vec<String> {
    steps
        .iter()
        .flat_map(|s| s["results"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect()
}

/// The calendar task: solvable through `add_event` or through a CalDAV client in a terminal;
/// the checkpoint asks Radicale itself.
fn calendar_task(id: &str, r: &Radicale, oracle: Value) -> Value {
    let report = report_argv(&r.url());
    json!({
        "id": id,
        "instruction": "Put 'Dentist' in my calendar on 2026-12-03 at 9:00.",
        "envs": {"desktop": {"platform": "linux"}},
        "tools": {"desktop": [add_event(&r.calendar)]},
        "checkpoints": [
            {"id": "booked", "env": "desktop", "check": "command_output_matches",
             "args": {"argv": report, "regex": "SUMMARY:Dentist"}}
        ],
        "limits": {"max_steps": 8},
        "oracle": oracle
    })
}

#[test]
fn a_tool_books_an_event_in_radicale_and_another_run_books_it_through_the_gui() {
    let sb = Sandbox::new();
    let r = Radicale::start(sb.path());
    // Through the tool: one tool call, no GUI action.
    let task = task_file(
        sb.path(),
        &calendar_task(
            "calendar-tool",
            &r,
            json!([
                {"do": "tool", "name": "add_event", "arguments": {"title": "Dentist", "date": "2026-12-03", "hour": 9}},
                {"do": "complete"}
            ]),
        ),
    );
    let (record, steps) = oracle_run(&sb, &task, &["--tools"]);
    assert_eq!(record["termination"], "success", "{record}");
    assert_eq!(record["tool_calls"], 1);
    let said = results(&steps);
    assert!(
        said.iter()
            .any(|r| r.starts_with("ok: tool add_event succeeded; output: created event")),
        "{said:?}"
    );
    let events = r.events();
    assert!(events.contains("SUMMARY:Dentist"), "{events}");
    assert!(events.contains("DTSTART:20261203T090000"), "{events}");

    // The same task through the GUI: a CalDAV client (curl) typed into a terminal.
    let r2 = Radicale::start(&sb.path().join("second"));
    let ics = "BEGIN:VCALENDAR\\r\\nVERSION:2.0\\r\\nPRODID:-//gui//EN\\r\\nBEGIN:VEVENT\\r\\nUID:gui-1\\r\\nDTSTAMP:20260101T000000Z\\r\\nDTSTART:20261203T090000\\r\\nDURATION:PT1H\\r\\nSUMMARY:Dentist\\r\\nEND:VEVENT\\r\\nEND:VCALENDAR\\r\\n";
    let command = format!(
        "printf '{ics}' | curl -sS -u alice:x -X PUT -H 'Content-Type: text/calendar' --data-binary @- {}gui-1.ics\n",
        r2.url()
    );
    let kill =
        json!({"do": "exec", "argv": ["pkill", "-s", "0", "-x", "xfce4-terminal"], "check": false});
    let mut gui = calendar_task(
        "calendar-gui",
        &r2,
        json!([
            {"do": "type", "text": command, "target": {"role": "terminal"}},
            {"do": "sleep", "ms": 1500},
            {"do": "complete"}
        ]),
    );
    gui["setup"] = json!({"desktop": [kill, {"do": "launch", "argv": ["xfce4-terminal", "--disable-server"]}, {"do": "wait_window", "title_contains": "Terminal"}]});
    gui["teardown"] = json!({"desktop": [kill]});
    let (record, _) = oracle_run(&sb, &task_file(sb.path(), &gui), &["--tools"]);
    assert_eq!(record["termination"], "success", "{record}");
    assert_eq!(record["tool_calls"], 0, "solved on the screen: {record}");
    assert!(record["actions"].as_u64().unwrap() >= 1, "{record}");
    assert!(r2.events().contains("SUMMARY:Dentist"));
}

#[test]
fn a_tool_sends_mail_that_dovecot_serves_over_imap() {
    let sb = Sandbox::new();
    let m = maildir(sb.path());
    let task = json!({
        "id": "mail-tool",
        "instruction": "Mail bob@example.org that the meeting moved, subject 'Meeting moved'.",
        "envs": {"desktop": {"platform": "linux"}},
        "tools": {"desktop": [send_mail(&m)]},
        "checkpoints": [
            {"id": "sent", "env": "desktop", "check": "command_output_matches",
             "args": {"argv": ["grep", "-rl", "Subject: Meeting moved", m.join("new").to_str().unwrap()], "regex": "pincer"}}
        ],
        "oracle": [
            {"do": "tool", "name": "send_mail", "arguments": {"to": "bob@example.org", "subject": "Meeting moved", "body": "It is at 3 now.\nSee you."}},
            {"do": "complete"}
        ]
    });
    let (record, steps) = oracle_run(&sb, &task_file(sb.path(), &task), &["--tools"]);
    assert_eq!(
        record["termination"],
        "success",
        "{record} {:?}",
        results(&steps)
    );
    assert_eq!(record["tool_calls"], 1);
    let imap = imap_headers(&m);
    assert!(imap.contains("* 1 EXISTS"), "{imap}");
    assert!(imap.contains("Subject: Meeting moved"), "{imap}");
    assert!(imap.contains("To: bob@example.org"), "{imap}");
}

#[test]
fn without_run_tools_agents_get_no_tools_and_a_tool_call_is_invalid() {
    let sb = Sandbox::new();
    let m = maildir(sb.path());
    let task = json!({
        "id": "mail-offline",
        "instruction": "Mail bob.",
        "envs": {"desktop": {"platform": "linux"}},
        "tools": {"desktop": [send_mail(&m)]},
        "checkpoints": [
            {"id": "sent", "env": "desktop", "check": "command_output_matches",
             "args": {"argv": ["ls", m.join("new").to_str().unwrap()], "regex": "pincer"}}
        ],
        "limits": {"max_steps": 3},
        "oracle": [
            {"do": "tool", "name": "send_mail", "arguments": {"to": "bob@example.org", "subject": "Hi", "body": "x"}},
            {"do": "complete"}
        ]
    });
    let (record, steps) = oracle_run(&sb, &task_file(sb.path(), &task), &[]);
    assert_ne!(record["termination"], "success", "{record}");
    let said = results(&steps);
    assert!(
        said.iter()
            .any(|r| r.contains("no API tools are offered here")),
        "{said:?}"
    );
    assert_eq!(std::fs::read_dir(m.join("new")).unwrap().count(), 0);
}

fn call(spec: Value, args: &[(&str, ToolValue)]) -> ToolCall {
    ToolCall {
        spec: serde_json::from_value::<ToolSpec>(spec).unwrap(),
        args: args
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    }
}

fn plain(name: &str, argv: &[&str], sandbox: ToolSandbox) -> Value {
    json!({"name": name, "description": "test", "argv": argv, "sandbox": sandbox_json(&sandbox)})
}

fn sandbox_json(s: &ToolSandbox) -> Value {
    json!({"read": s.read, "write": s.write})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_stay_in_their_sandbox_and_guests_refuse_them_unless_allowed() {
    let sb = Sandbox::new();
    let r = Radicale::start(sb.path());
    let d = sb.desktop("tools", "640x480", &["--allow-tools"]);
    let env = d.connect().await;
    assert!(
        env.info()
            .unwrap()
            .capabilities
            .contains(&"tools".to_owned())
    );
    let s = |x: &str| ToolValue::String(x.into());

    // The network: Radicale answers on the host's loopback, not from inside the sandbox.
    assert!(r.events().contains("multistatus"));
    let url = r.url();
    let out = env
        .tool(call(
            plain(
                "net",
                &["/usr/bin/curl", "-sS", "--max-time", "5", &url],
                ToolSandbox::default(),
            ),
            &[],
        ))
        .await
        .unwrap();
    assert_ne!(
        out.status,
        ExitStatus::Exited(0),
        "the sandbox reached {url}"
    );
    let out = env
        .tool(call(
            plain(
                "dns",
                &["/usr/bin/getent", "hosts", "debian.org"],
                ToolSandbox::default(),
            ),
            &[],
        ))
        .await
        .unwrap();
    assert_ne!(out.status, ExitStatus::Exited(0));

    // Paths it was not given: the desktop's state (the agent's token lives there), /root.
    let state = sb.path().join("state");
    for path in [
        state.to_str().unwrap(),
        "/root",
        sb.path().to_str().unwrap(),
    ] {
        let out = env
            .tool(call(
                plain("ls", &["/usr/bin/ls", path], ToolSandbox::default()),
                &[],
            ))
            .await
            .unwrap();
        assert_ne!(out.status, ExitStatus::Exited(0), "{path} is visible");
    }
    // Its calendar, given to it, it can write.
    let spec = add_event(&r.calendar);
    let out = env
        .tool(call(
            spec.clone(),
            &[
                ("title", s("Standup")),
                ("date", s("2026-12-04")),
                ("hour", ToolValue::Integer(10)),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        out.status,
        ExitStatus::Exited(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(r.events().contains("SUMMARY:Standup"));

    // Arguments outside the schema: refused before anything runs.
    let before = std::fs::read_dir(&r.calendar).unwrap().count();
    for (args, says) in [
        (
            vec![("title", s("Standup\nATTENDEE:evil"))],
            "may not contain",
        ),
        (
            vec![
                ("title", s("x")),
                ("date", s("2026-12-04")),
                ("hour", ToolValue::Integer(25)),
            ],
            "within 0 to 23",
        ),
        (
            vec![
                ("title", s("x")),
                ("date", s("2026/12/04")),
                ("hour", ToolValue::Integer(1)),
            ],
            "may not contain '/'",
        ),
        (
            vec![("title", s("x")), ("date", s("2026-12-04"))],
            "needs `hour`",
        ),
    ] {
        match env.tool(call(spec.clone(), &args)).await {
            Err(ClientError::Guest {
                source: WireError::InvalidArgument { message },
                ..
            }) => {
                assert!(message.contains(says), "{message} should say {says}");
            }
            other => panic!("{args:?}: expected InvalidArgument, got {other:?}"),
        }
    }
    assert_eq!(std::fs::read_dir(&r.calendar).unwrap().count(), before);
    drop(env);
    drop(d);

    // Guests without the opt-in, and read-only ones even with it, refuse by name.
    for (name, flags, says) in [
        ("plain", &[] as &[&str], "--allow-tools"),
        ("ro", &["--read-only", "--allow-tools"], "--read-only"),
    ] {
        let d = sb.desktop(name, "640x480", flags);
        let env = d.connect().await;
        assert!(
            !env.info()
                .unwrap()
                .capabilities
                .contains(&"tools".to_owned())
        );
        match env
            .tool(call(
                spec.clone(),
                &[
                    ("title", s("Nope")),
                    ("date", s("2026-12-05")),
                    ("hour", ToolValue::Integer(1)),
                ],
            ))
            .await
        {
            Err(ClientError::Guest {
                source:
                    WireError::Forbidden {
                        class: RequestClass::Tool,
                        reason,
                    },
                ..
            }) => {
                assert!(reason.contains(says), "{reason}");
            }
            other => panic!("{name}: expected a refusal, got {other:?}"),
        }
    }
    assert!(!r.events().contains("SUMMARY:Nope"));
}

/// Tool call latency through the whole stack (host, QUIC, guest, bwrap), printed for the
/// README: p50 and p95 of `/usr/bin/true` in the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_latency() {
    let sb = Sandbox::new();
    let d = sb.desktop("latency", "640x480", &["--allow-tools"]);
    let env = d.connect().await;
    let spec = plain("true", &["/usr/bin/true"], ToolSandbox::default());
    let mut ms = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        let out = env.tool(call(spec.clone(), &[])).await.unwrap();
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(out.status, ExitStatus::Exited(0));
    }
    ms.sort_by(f64::total_cmp);
    eprintln!(
        "tool call latency over {} calls: p50 {:.1} ms, p95 {:.1} ms",
        ms.len(),
        ms[ms.len() / 2],
        ms[ms.len() * 95 / 100]
    );
    assert!(ms[ms.len() / 2] < 2000.0);
}

/// The bundled example (`tasks/examples/calendar-dentist.json`): its setup starts Radicale
/// on the desktop; its oracle books the event in a terminal, and the same task booked
/// through its `add_event` tool scores the same, the record telling the two apart.
#[test]
fn the_bundled_calendar_example_is_solved_on_the_screen_and_through_its_tool() {
    let sb = Sandbox::new();
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/examples/calendar-dentist.json");
    let (record, _) = oracle_run(&sb, &file, &["--tools"]);
    assert_eq!(record["termination"], "success", "{record}");
    assert_eq!(record["tool_calls"], 0, "solved on the screen: {record}");
    let mut by_tool: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    by_tool["oracle"] = json!([
        {"do": "tool", "name": "add_event", "arguments": {"title": "Dentist", "date": "2026-12-03", "hour": 9}},
        {"do": "complete"}
    ]);
    let (record, _) = oracle_run(&sb, &task_file(sb.path(), &by_tool), &["--tools"]);
    assert_eq!(record["termination"], "success", "{record}");
    assert_eq!(record["tool_calls"], 1, "{record}");
    // The teardown stopped Radicale and removed its calendar.
    assert!(!Path::new("/tmp/pincer-calendar").exists());
}
