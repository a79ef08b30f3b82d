//! OSWorld on pincer, end to end through the real binary: its task files imported, and
//! end states on a real local desktop scored by pincer (`pincer task check --no-setup
//! --json`: pincer's getters over the guest protocol, OSWorld's metrics in the sandboxed
//! scorer) and by OSWorld's own `DesktopEnv.evaluate()` with its own getters and metrics
//! (`tests/osworld/lab.py`, from the pinned desktop-env): the scores must agree.
//!
//! Needs the scorer's environment (`pincer osworld setup`; `./run.sh test` makes it).

use pincer_tests::{Sandbox, import_osworld_evaluators, osworld_score, results};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// OSWorld's task folder as the project carries it.
fn fixture() -> String {
    repo()
        .join("fixtures/osworld-2024/evaluation_examples")
        .display()
        .to_string()
}

/// The scorer's environment, which the lab's Python is.
fn scorer_env() -> PathBuf {
    let env = pincer::peers::osworld::scorer::default_env();
    assert!(
        pincer::peers::osworld::scorer::check_env(&env).is_ok(),
        "OSWorld's scorer is not set up at {}: run `pincer osworld setup` (./run.sh test does)",
        env.display()
    );
    env
}

/// The lab: OSWorld's own evaluate() and the end states' maker.
struct Lab {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Lab {
    fn start() -> Self {
        let mut child = Command::new(scorer_env().join("bin/python"))
            .arg(repo().join("tests/osworld/lab.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the lab");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn ask(&mut self, req: Value) -> Value {
        writeln!(self.stdin, "{req}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("lab said {line:?}: {e}"))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn pincer_scores_end_states_exactly_as_osworlds_own_code() {
    let sb = Sandbox::new();
    let mut lab = Lab::start();
    let folder = sb.path().join("osworld examples");
    let prepared = lab.ask(json!({"op": "prepare", "out": folder,
        "fixture": fixture()}));
    let cases = prepared["cases"].as_array().expect("cases").clone();
    let tasks = sb.path().join("tasks");
    let assets = sb.path().join("cache é");
    let report = sb.pincer_ok(&[
        "task",
        "import-osworld",
        folder.to_str().unwrap(),
        "--out",
        tasks.to_str().unwrap(),
        "--assets",
        assets.to_str().unwrap(),
    ]);
    assert!(report.contains("tasks written"), "{report}");
    let _desktop = sb.desktop("osworld-lab", "800x600", &["--no-wm"]);
    let home = sb.path().join("state/desktops/osworld-lab/home");
    assert!(home.is_dir(), "{}", home.display());

    let mut rows = Vec::new();
    let mut disagree = Vec::new();
    for c in &cases {
        let (name, task) = (c["name"].as_str().unwrap(), c["task"].as_str().unwrap());
        let at = json!({"case": name, "home": home, "assets": assets});
        let made = lab.ask(json!({"op": "make", "case": name, "home": home, "assets": assets}));
        assert_eq!(made["ok"], true, "{name}: {made}");
        let (ours, detail) = osworld_score(&sb, &tasks, Some(&assets), task);
        let mut req = at.clone();
        req["op"] = "score".into();
        let theirs = lab.ask(req);
        let agree = match (ours, theirs["score"].as_f64()) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-6,
            // Both refuse to score (a metric that raises in OSWorld's code raises in ours).
            (None, None) => theirs.get("error").is_some(),
            _ => false,
        };
        rows.push(format!(
            "{name:<24} pincer {:<10} osworld {}",
            ours.map_or("error".into(), |s| format!("{s:.6}")),
            theirs["score"].as_f64().map_or_else(
                || format!("error ({})", theirs["error"]),
                |s| format!("{s:.6}")
            )
        ));
        if !agree {
            disagree.push(format!("{name}: pincer {detail}\n  osworld {theirs}"));
        }
    }
    let table = rows.join("\n");
    eprintln!("{table}");
    assert!(disagree.is_empty(), "{}\n\n{table}", disagree.join("\n"));
    // The cases span full, failing, graded and unscorable end states, so agreement means
    // something.
    let count = |pat: &str| rows.iter().filter(|r| r.contains(pat)).count();
    assert!(count("pincer 1.000000") >= 10, "{table}");
    assert!(count("pincer 0.000000") >= 10, "{table}");
    assert!(
        rows.iter().any(|r| {
            r.split_whitespace()
                .nth(2)
                .and_then(|s| s.parse::<f64>().ok())
                .is_some_and(|s| s > 0.0 && s < 1.0)
        }),
        "no graded score among the cases:\n{table}"
    );
    assert!(count("pincer error") >= 1, "{table}");
}

/// Tasks of the fixture by domain: one offline task per offline domain that a desktop here
/// can run (OSWorld's infeasible ones: the right answer is to say so), a Calc task whose
/// files the test's stand-in for OSWorld's file host provides, and one task of each kind
/// that cannot run here.
const RUNNABLE: &[&str] = &[
    "chrome/3720f614-37fd-4d04-8a6b-76f54f8c222d",
    "gimp/e19bd559-633b-4b02-940f-d946248f088e",
    "libreoffice_calc/2bd59342-0664-4ccb-ba87-79379096cc08",
    "multi_apps/6d72aad6-187a-4392-a4c4-ed87269c51cf",
    "os/b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa",
];
const CALC: &str = "libreoffice_calc/01b269ae-2111-4a07-81fd-3fcd711993b0";
const NOT_HERE: &[(&str, &str)] = &[
    (
        "gimp/77b8ab4d-994f-43ac-8930-8ca087d7c4b4",
        "needs files: 1 of its 1 files are not in",
    ),
    (
        "libreoffice_impress/c59742c0-4323-4b9d-8a02-723c251deaa0",
        "not supported: metric compare_audios",
    ),
    (
        "multi_apps/46407397-a7d5-4c6b-92c6-dbe038b1457b",
        "not supported: getter googledrive_file",
    ),
    (
        "vlc/aa4b5023-aef6-4ed9-bdc9-705f59ab9ad6",
        "not supported: metric compare_videos",
    ),
];

/// Writes an xlsx of one column (None: an empty cell) with openpyxl from the scorer's
/// environment.
fn xlsx(path: &Path, cells: &[Option<&str>]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let code = "import json, sys, openpyxl\n\
                wb = openpyxl.Workbook(); ws = wb.active\n\
                for i, v in enumerate(json.loads(sys.argv[2])): ws.cell(row=i + 1, column=1, value=v)\n\
                wb.save(sys.argv[1])";
    let ok = Command::new(scorer_env().join("bin/python"))
        .args([
            "-c",
            code,
            path.to_str().unwrap(),
            &json!(cells).to_string(),
        ])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Sets each imported task's oracle (the scripted agent) in place.
fn script(tasks: &Path, oracles: &[(&str, Value)]) {
    for (id, oracle) in oracles {
        let path = tasks.join(format!("{id}.json"));
        let mut t: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        t["oracle"] = oracle.clone();
        std::fs::write(&path, t.to_string()).unwrap();
    }
}

#[test]
fn imported_tasks_run_to_the_agents_end_and_what_cannot_run_is_skipped_with_why() {
    let sb = Sandbox::new();
    let mut index = serde_json::Map::new();
    for id in RUNNABLE
        .iter()
        .chain([&CALC])
        .chain(NOT_HERE.iter().map(|(id, _)| id))
    {
        let (domain, id) = id.split_once('/').unwrap();
        index
            .entry(domain)
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .unwrap()
            .push(id.into());
    }
    let index_file = sb.path().join("index.json");
    std::fs::write(&index_file, Value::Object(index).to_string()).unwrap();
    let tasks = sb.path().join("imported");
    let cache = sb.path().join("OSWorld cache");
    sb.pincer_ok(&[
        "task",
        "import-osworld",
        &fixture(),
        "--index",
        index_file.to_str().unwrap(),
        "--out",
        tasks.to_str().unwrap(),
        "--assets",
        cache.to_str().unwrap(),
    ]);

    // A stand-in for OSWorld's file host (no internet here): the Calc task's sheet, with
    // blanks to fill from the cell above, and its gold, where OSWorld's cache keeps them.
    let calc: Value =
        serde_json::from_str(&std::fs::read_to_string(tasks.join(format!("{CALC}.json"))).unwrap())
            .unwrap();
    let sheet = calc["setup"]["desktop"][0]["asset"].as_str().unwrap();
    xlsx(&cache.join(sheet), &[Some("A"), None, Some("B"), None]);
    let gold = cache.join(format!(
        "{}/Student_Level_Fill_Blank_gold.xlsx",
        CALC.split_once('/').unwrap().1
    ));
    xlsx(&gold, &[Some("A"), Some("A"), Some("B"), Some("B")]);

    let desktop = sb.desktop("osworld-run", "1920x1080", &[]);
    // OSWorld's machine saves Office files in the format they came in without asking.
    let profile = sb
        .path()
        .join("state/desktops/osworld-run/home/.config/libreoffice/4/user");
    std::fs::create_dir_all(&profile).unwrap();
    std::fs::write(
        profile.join("registrymodifications.xcu"),
        r#"<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="WarnAlienFormat" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Setup/Office"><prop oor:name="ooSetupInstCompleted" oor:op="fuse"><value>true</value></prop></item>
</oor:items>
"#,
    )
    .unwrap();

    let table =
        json!({"role": "table", "inside": {"role": "frame", "name_contains": "LibreOffice Calc"}});
    let fill = |second: &str| {
        json!([
            {"do": "wait_for", "target": table, "timeout_ms": 90000},
            {"do": "key", "key": "ctrl+home"},
            {"do": "key", "key": "Down"},
            {"do": "type", "text": "A\n"},
            {"do": "key", "key": "Down"},
            {"do": "type", "text": format!("{second}\n")},
            {"do": "complete"}
        ])
    };
    let run = |name: &str, oracles: &[(&str, Value)]| {
        script(&tasks, oracles);
        let out = sb.path().join(name);
        let o = sb.pincer(&[
            "run",
            "--tasks",
            tasks.to_str().unwrap(),
            "--agent",
            "oracle",
            "--end",
            "agent",
            "--set",
            &format!("desktop={}", desktop.name),
            "--assets",
            cache.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--no-report",
        ]);
        let said = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{said}");
        (out, said)
    };

    // The scripted agent that solves: says infeasible where that is the answer, fills
    // the sheet (OSWorld's postconfig then saves it).
    let mut solve: Vec<(&str, Value)> = RUNNABLE
        .iter()
        .map(|id| {
            (
                *id,
                json!([{"do": "infeasible", "reason": "this cannot be done here"}]),
            )
        })
        .collect();
    solve.push((CALC, fill("B")));
    let (out, said) = run("solved", &solve);
    assert!(
        said.contains(&format!("skipping {} tasks", NOT_HERE.len())),
        "{said}"
    );
    for (id, why) in NOT_HERE {
        assert!(said.contains(&format!("{id}: {why}")), "{id}: {said}");
    }
    let skipped: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("skipped.json")).unwrap()).unwrap();
    assert_eq!(
        skipped.as_array().unwrap().len(),
        NOT_HERE.len(),
        "{skipped}"
    );
    let recs = results(&out);
    eprintln!("{said}");
    for r in &recs {
        eprintln!(
            "{} {} {} {}",
            r["task"], r["termination"], r["score"], r["detail"]
        );
    }
    assert_eq!(recs.len(), RUNNABLE.len() + 1, "{recs:?}");
    for r in &recs {
        assert_eq!(
            (r["termination"].as_str(), r["score"].as_f64()),
            (Some("success"), Some(1.0)),
            "{r}"
        );
    }
    let header: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(header["end"], "agent", "{header}");

    // Near misses: saying done where the task is infeasible, a wrong value in the sheet.
    let mut miss: Vec<(&str, Value)> = RUNNABLE
        .iter()
        .map(|id| (*id, json!([{"do": "complete"}])))
        .collect();
    miss.push((CALC, fill("A")));
    let (out, _) = run("missed", &miss);
    for r in results(&out) {
        eprintln!(
            "{} {} {} {}",
            r["task"], r["termination"], r["score"], r["detail"]
        );
        assert_eq!(r["termination"], "false-completion", "{r}");
        assert!(r["score"].as_f64().unwrap() < 1.0, "{r}");
    }
}

/// A stand-in for OSWorld's file host (there is no internet here), on loopback: serves
/// `files` by path with their length and byte ranges, and cuts the body of a path under
/// `/flaky/` in half the first time it is asked for. Returns its port and the requests
/// it saw (`METHOD PATH RANGE`).
fn file_host(
    files: std::collections::HashMap<String, Vec<u8>>,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let mut words = head.split_whitespace();
            let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let range = head
                .lines()
                .find_map(|l| {
                    l.strip_prefix("range: bytes=")
                        .or(l.strip_prefix("Range: bytes="))
                })
                .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok());
            let first_flaky = path.starts_with("/flaky/")
                && !log
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|l: &String| l.contains(path));
            log.lock().unwrap().push(format!(
                "{method} {path} {}",
                range.map_or("-".into(), |r| r.to_string())
            ));
            let Some(body) = files.get(path) else {
                let _ = conn.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
                continue;
            };
            let (status, from) = match range {
                Some(from) if from < body.len() => ("206 Partial Content", from),
                _ => ("200 OK", 0),
            };
            let mut reply = format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len() - from
            );
            if from > 0 {
                reply += &format!(
                    "content-range: bytes {from}-{}/{}\r\n",
                    body.len() - 1,
                    body.len()
                );
            }
            reply += "\r\n";
            let _ = conn.write_all(reply.as_bytes());
            if method == "GET" {
                let end = if first_flaky {
                    body.len() / 2
                } else {
                    body.len()
                };
                let _ = conn.write_all(&body[from..end]);
            }
        }
    });
    (port, seen)
}

#[test]
fn fetch_fills_osworlds_cache_resumes_and_refetches_files_of_the_wrong_size() {
    let sb = Sandbox::new();
    let sheet: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let gold: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    let (port, seen) = file_host(
        [
            ("/files/sheet.xlsx".to_owned(), sheet.clone()),
            ("/flaky/gold.xlsx".to_owned(), gold.clone()),
        ]
        .into(),
    );
    let host = format!("http://127.0.0.1:{port}");
    let folder = sb.path().join("OSWorld tasks");
    let task = |id: &str, download: &str, gold_url: &str| {
        json!({
            "id": id, "instruction": "Fill the blanks.",
            "config": [{"type": "download", "parameters": {"files": [
                {"url": download, "path": "/home/user/sheet.xlsx"}]}}],
            "evaluator": {"func": "compare_table",
                "result": {"type": "vm_file", "path": "/home/user/sheet.xlsx", "dest": "sheet.xlsx"},
                "expected": {"type": "cloud_file", "path": gold_url, "dest": "gold.xlsx"}}
        })
    };
    std::fs::create_dir_all(folder.join("examples/libreoffice_calc")).unwrap();
    for (id, t) in [
        (
            "t-one",
            task(
                "t-one",
                &format!("{host}/files/sheet.xlsx"),
                &format!("{host}/flaky/gold.xlsx"),
            ),
        ),
        (
            "t-two",
            task(
                "t-two",
                &format!("{host}/files/sheet.xlsx"),
                &format!("{host}/flaky/gold.xlsx"),
            ),
        ),
    ] {
        std::fs::write(
            folder.join(format!("examples/libreoffice_calc/{id}.json")),
            t.to_string(),
        )
        .unwrap();
    }
    std::fs::write(
        folder.join("test_all.json"),
        json!({"libreoffice_calc": ["t-one", "t-two"]}).to_string(),
    )
    .unwrap();
    let cache = sb.path().join("cache ü");
    let fetch = || {
        sb.pincer(&[
            "osworld",
            "fetch",
            folder.to_str().unwrap(),
            "--assets",
            cache.to_str().unwrap(),
            "--parallel",
            "3",
        ])
    };
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };

    // Four files (two tasks, each with its setup file and its gold), in OSWorld's layout.
    let o = fetch();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("4 fetched"), "{}", text(&o));
    let sheet_name = |id: &str| {
        format!(
            "{id}/{}_sheet.xlsx",
            pincer::peers::osworld::cache::uuid5_url(&format!("{host}/files/sheet.xlsx"))
        )
    };
    for id in ["t-one", "t-two"] {
        assert_eq!(std::fs::read(cache.join(sheet_name(id))).unwrap(), sheet);
        assert_eq!(
            std::fs::read(cache.join(format!("{id}/gold.xlsx"))).unwrap(),
            gold
        );
    }
    // The gold was cut off on its first download and continued, not started over.
    let log = seen.lock().unwrap().clone();
    assert!(
        log.iter()
            .any(|l| l.starts_with("GET /flaky/gold.xlsx ") && !l.ends_with(" -")),
        "no ranged request after the cut: {log:?}"
    );

    // Whole files are not fetched again, and nothing is asked of the host.
    let before = seen.lock().unwrap().len();
    let o = fetch();
    assert!(
        text(&o).contains("0 fetched") && text(&o).contains("4 already there"),
        "{}",
        text(&o)
    );
    assert_eq!(seen.lock().unwrap().len(), before);

    // A file of the wrong size is refused and fetched again; so is one in a cache pincer
    // did not fill (no record of its size) when the host announces another length.
    std::fs::write(cache.join("t-one/gold.xlsx"), b"cut").unwrap();
    std::fs::remove_file(cache.join(".pincer-fetch.json")).unwrap();
    std::fs::write(cache.join(sheet_name("t-two")), b"short").unwrap();
    let o = fetch();
    assert!(
        text(&o).contains("2 fetched") && text(&o).contains("2 already there"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::read(cache.join("t-one/gold.xlsx")).unwrap(), gold);
    assert_eq!(
        std::fs::read(cache.join(sheet_name("t-two"))).unwrap(),
        sheet
    );

    // A file the host does not have fails the fetch, naming it; nothing half-made stays.
    let t = task(
        "t-three",
        &format!("{host}/files/missing.xlsx"),
        &format!("{host}/flaky/gold.xlsx"),
    );
    std::fs::write(
        folder.join("examples/libreoffice_calc/t-three.json"),
        t.to_string(),
    )
    .unwrap();
    std::fs::write(
        folder.join("test_all.json"),
        json!({"libreoffice_calc": ["t-one", "t-two", "t-three"]}).to_string(),
    )
    .unwrap();
    let o = fetch();
    assert!(!o.status.success());
    let said = text(&o);
    assert!(
        said.contains("missing.xlsx") && said.contains("404"),
        "{said}"
    );
    assert!(
        said.contains("run the same command again to resume"),
        "{said}"
    );

    // The import now finds the first two tasks' files.
    let report = sb.pincer_ok(&[
        "task",
        "import-osworld",
        folder.to_str().unwrap(),
        "--assets",
        cache.to_str().unwrap(),
    ]);
    let all = report.lines().find(|l| l.starts_with("all")).unwrap();
    let cols: Vec<&str> = all.split_whitespace().collect();
    assert_eq!(cols[1..5], ["3", "0", "2", "1"], "{report}");
}

/// The parent of process `p`, if it still exists.
fn parent_of(p: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
    // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The processes under `pid` (children, their children, ...).
fn descendants(pid: u32) -> Vec<u32> {
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|&&c| parent_of(c) == Some(p)));
        i += 1;
    }
    found.remove(0);
    found
}

/// A request that OSWorld's `exact_match` scores 1.
fn exact_match_request() -> pincer::peers::osworld::scorer::Request {
    use pincer::peers::osworld::scorer::{Call, Request};
    Request {
        metrics: vec![("general".into(), "exact_match".into())],
        single: true,
        conj: "and".into(),
        calls: vec![Call {
            result: "yes\n".into(),
            expected: json!({"expected": "yes\n"}),
            has_expected: true,
            options: serde_json::Map::new(),
            result_getter: None,
            expected_getter: None,
        }],
    }
}

#[test]
fn a_scorer_worker_that_dies_or_hangs_is_an_error_and_the_next_score_starts_a_new_one() {
    use pincer::peers::osworld::scorer::{Scorer, ScorerError};
    // Generous: the first call imports the metric's module (pandas, openpyxl, formulas),
    // seconds on a loaded machine.
    let scorer = Scorer::new(scorer_env()).with_call_timeout(std::time::Duration::from_secs(20));
    let req = exact_match_request();
    // The worker outlives the thread that asked first. bubblewrap kills it when the thread
    // that started it ends, and a run scores on whichever of the async runtime's threads is
    // free (idle blocking threads end after seconds): the worker died between two tasks,
    // and `pincer run` died writing the next request (SIGPIPE).
    std::thread::scope(|s| {
        let first = s.spawn(|| scorer.score(&req).map(|r| r.score));
        assert_eq!(first.join().unwrap().unwrap(), 1.0);
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    assert_eq!(scorer.score(&req).unwrap().score, 1.0);
    // The worker runs under bubblewrap, a child of this process; python under it. Other
    // tests of this binary run `pincer` subprocesses with workers of their own: only the
    // bubblewrap children of this process belong to this test's `Scorer`.
    let python = || -> Vec<u32> {
        descendants(std::process::id())
            .into_iter()
            .filter(|&p| parent_of(p) == Some(std::process::id()))
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "bwrap")
            })
            .flat_map(descendants)
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains("pincer's OSWorld scorer"))
            })
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.starts_with("python"))
            })
            .collect()
    };
    let signal = |sig: &str| {
        let pids = python();
        assert_eq!(pids.len(), 1, "one worker: {pids:?}");
        let ok = Command::new("kill")
            .args([sig, &pids[0].to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    };

    // Killed: that score is an error (never a score), the next one is answered.
    signal("-KILL");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let e = scorer.score(&req).unwrap_err();
    assert!(matches!(e, ScorerError::Died(_)), "{e}");
    assert_eq!(scorer.score(&req).unwrap().score, 1.0);

    // Hung (stopped): killed at the limit, and the next score starts a new worker.
    signal("-STOP");
    let t = std::time::Instant::now();
    let e = scorer.score(&req).unwrap_err();
    assert!(matches!(e, ScorerError::Timeout(_)), "{e}");
    assert!(
        t.elapsed() < std::time::Duration::from_secs(60),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(scorer.score(&req).unwrap().score, 1.0);
    assert_eq!(python().len(), 1, "the hung worker is gone");
}

#[test]
fn tasks_that_need_the_web_run_only_with_allow_network_which_the_run_records() {
    let sb = Sandbox::new();
    let folder = sb.path().join("web task");
    std::fs::create_dir_all(folder.join("examples/os")).unwrap();
    let task = json!({
        "id": "web-1",
        "instruction": "Say done.",
        "config": [{"type": "execute", "parameters": {
            "command": ["sh", "-c", "pip install --dry-run nothing >/dev/null 2>&1 || true"]}}],
        "evaluator": {"func": "exact_match",
            "result": {"type": "vm_command_line", "command": "echo hi", "shell": true},
            "expected": {"type": "rule", "rules": {"expected": "hi\n"}}}
    });
    std::fs::write(folder.join("examples/os/web-1.json"), task.to_string()).unwrap();
    std::fs::write(
        folder.join("test_all.json"),
        json!({"os": ["web-1"]}).to_string(),
    )
    .unwrap();
    let tasks = sb.path().join("tasks");
    sb.pincer_ok(&[
        "task",
        "import-osworld",
        folder.to_str().unwrap(),
        "--out",
        tasks.to_str().unwrap(),
    ]);
    script(&tasks, &[("os/web-1", json!([{"do": "complete"}]))]);
    let run = |out: &str, extra: &[&str]| {
        let out = sb.path().join(out);
        let mut args = vec![
            "run",
            "--tasks",
            tasks.to_str().unwrap(),
            "--agent",
            "oracle",
            "--size",
            "800x600",
            "--no-report",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        (sb.pincer(&args), out)
    };
    let (o, _) = run("closed", &[]);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{said}");
    assert!(
        said.contains("os/web-1: needs the live web (setup step 0 installs packages from the network); run with --allow-network"),
        "{said}"
    );
    assert!(said.contains("none of the tasks can run here"), "{said}");

    let (o, out) = run("open", &["--allow-network"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rec = &results(&out)[0];
    assert_eq!(
        (rec["termination"].as_str(), rec["score"].as_f64()),
        (Some("success"), Some(1.0)),
        "{rec}"
    );
    let header: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        header["network"], true,
        "the run says it was not hermetic: {header}"
    );
}

/// OSWorld's window steps: by class (`wmctrl -x`), and a missing window only logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_steps_find_windows_by_class_and_optional_ones_pass_when_missing() {
    use pincer::task::steps::{Step, WindowAction};
    use pincer_shared::probe::{Probe, ProbeReply};
    let sb = Sandbox::new();
    let desktop = sb.desktop("osworld-windows", "800x600", &[]);
    let env = desktop.connect().await;
    let zenity = || async {
        match env.probe(Probe::Windows).await.unwrap() {
            ProbeReply::Windows(ws) => ws
                .into_iter()
                .find(|w| w.class.as_deref() == Some("Zenity")),
            _ => None,
        }
    };
    env.launch(
        vec![
            "zenity".into(),
            "--info".into(),
            "--title".into(),
            "Note".into(),
        ],
        vec![],
    )
    .await
    .unwrap();
    // Waits up to `secs` until zenity's window is there (`shown`) or gone, else fails
    // with `what`.
    let until = |shown: bool, secs: u64, what: &'static str| async move {
        let t = std::time::Instant::now();
        while zenity().await.is_some() != shown {
            assert!(t.elapsed().as_secs() < secs, "{what}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    until(true, 60, "zenity's window never showed").await;
    let window = |name: &str, by_class: bool, optional: bool| Step::Window {
        title_contains: name.into(),
        op: WindowAction::Close,
        by_class,
        optional,
    };
    // Its title is "Note"; its class, as wmctrl -x writes it, "zenity.Zenity".
    window("ZENITY.zen", true, false)
        .run(&env, None)
        .await
        .unwrap();
    until(false, 30, "closed by class").await;
    // Gone now: a required step fails naming it, an optional one passes.
    let t = std::time::Instant::now();
    window("zenity", true, true).run(&env, None).await.unwrap();
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
    let e = window("Note", false, false)
        .run(&env, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Note"), "{e}");
}

/// The offline tasks of OSWorld that the `osworld-offline` suite leaves out, each with why
/// (the README lists them the same way).
const OFFLINE_LEFT_OUT: &[(&str, &str)] = &[
    (
        "multi_apps/69acbb55",
        "installs a project's Python packages from the network",
    ),
    ("multi_apps/48d05431", "installs conda from the network"),
    ("multi_apps/e1fc0df3", "downloads LanguageTool and a JRE"),
    (
        "multi_apps/f8369178",
        "downloads a theme from gnome-look.org",
    ),
    (
        "multi_apps/3c8f201a",
        "downloads an image from Google Drive",
    ),
    ("os/94d95f96", "installs Spotify from the network"),
    (
        "libreoffice_impress/ef9d12bd",
        "closes the slide pane by pyautogui keys 5 s after launching Impress, which TCG does not start in time",
    ),
    (
        "os/13584542",
        "types into the terminal its postconfig opens half a second before, which TCG does not open in time",
    ),
    ("vs_code/", "VS Code is not in Debian (13 tasks)"),
];

/// The bundled `osworld-offline` suite is OSWorld's own task files as `import-osworld`
/// writes them, each with an oracle added and nothing else changed, and it holds every
/// offline task but those left out with a reason.
#[test]
fn the_offline_suite_is_osworlds_tasks_as_imported_each_with_an_oracle() {
    let sb = Sandbox::new();
    let out = sb.path().join("imported");
    sb.pincer_ok(&[
        "task",
        "import-osworld",
        &fixture(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(".osworld-import.json")).unwrap())
            .unwrap();
    let offline: Vec<&str> = report["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["category"] == "offline")
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    let suite = repo().join("tasks/osworld-offline");
    let mut in_suite = 0;
    for id in &offline {
        let path = suite.join(format!("{id}.json"));
        let left_out = OFFLINE_LEFT_OUT.iter().find(|(p, _)| id.starts_with(p));
        assert_eq!(
            path.exists(),
            left_out.is_none(),
            "{id}: in the suite {}, left out {left_out:?}",
            path.exists()
        );
        if left_out.is_some() {
            continue;
        }
        in_suite += 1;
        let mut task: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let oracle = task.as_object_mut().unwrap().remove("oracle");
        assert!(
            oracle
                .as_ref()
                .and_then(Value::as_array)
                .is_some_and(|o| !o.is_empty()),
            "{id} has no oracle"
        );
        let imported: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(format!("{id}.json"))).unwrap())
                .unwrap();
        assert_eq!(
            task, imported,
            "{id} differs from its import (re-import it and keep its oracle)"
        );
    }
    assert!(in_suite >= 40, "{in_suite} tasks");
    // The suite is bundled: it runs by name.
    let listed = sb.pincer_ok(&["task", "list", "--tasks", "osworld-offline"]);
    assert_eq!(
        listed
            .lines()
            .filter(|l| l.contains("single-desktop"))
            .count(),
        in_suite,
        "{listed}"
    );
}

/// OSWorld's getters that read the live desktop rather than files, on a real desktop:
/// `vm_terminal_output` (the focused terminal of gnome-terminal's active window, over
/// AT-SPI), `vm_screen_size` and `vm_window_size` (X11, through python-xlib as OSWorld's
/// server reads them), each scored by OSWorld's metric, passing and missing by turns.
#[test]
fn live_getters_read_the_terminal_and_window_sizes_as_osworlds_server_does() {
    let sb = Sandbox::new();
    let tasks = import_osworld_evaluators(
        &sb,
        "os",
        &[
            (
                "terminal",
                json!({"func": "check_include_exclude",
                "result": {"type": "vm_terminal_output"},
                "expected": {"type": "rule", "rules": {"include": ["PINCER-42"], "exclude": []}}}),
            ),
            (
                "fullscreen",
                json!({"func": "is_vlc_fullscreen",
                "expected": {"type": "vm_window_size", "app_class_name": "gnome-terminal"},
                "result": {"type": "vm_screen_size"}}),
            ),
            (
                "screen",
                json!({"func": "exact_match",
                "result": {"type": "vm_screen_size"},
                "expected": {"type": "rule", "rules": {"expected": {"width": 1024, "height": 768}}}}),
            ),
        ],
    );
    let desktop = sb.desktop("osworld-live", "1024x768", &[]);
    let env = desktop.name.as_str();
    let assets = sb.path().join("no files");
    let score = |task: &str| osworld_score(&sb, &tasks, Some(&assets), &format!("os/{task}")).0;
    // Waits until `task` scores `want` (the desktop acts asynchronously), or fails.
    let until = |task: &str, want: f64, what: &str| {
        let t = std::time::Instant::now();
        let mut last = None;
        while t.elapsed().as_secs() < 90 {
            last = score(task);
            if last == Some(want) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        panic!("{what}: os/{task} scored {last:?}, not {want}");
    };
    // No terminal and no window of its class: OSWorld's getters give None, its metrics 0.
    assert_eq!(score("terminal"), Some(0.0));
    assert_eq!(score("fullscreen"), Some(0.0));
    assert_eq!(score("screen"), Some(1.0));

    sb.pincer_ok(&[
        "launch",
        "--env",
        env,
        "--",
        "gnome-terminal",
        "--full-screen",
    ]);
    until("fullscreen", 1.0, "a full-screen gnome-terminal");
    sb.pincer_ok(&["act", "--env", env, "type", "echo PINCER-$((6*7))\n"]);
    until(
        "terminal",
        1.0,
        "the marker printed in the focused terminal",
    );
    // Out of full screen, the window is smaller than the screen.
    sb.pincer_ok(&["act", "--env", env, "key", "F11"]);
    until("fullscreen", 0.0, "gnome-terminal left full screen");
    // Another application's window in front: gnome-terminal's frame is no longer active.
    sb.pincer_ok(&[
        "launch", "--env", env, "--", "zenity", "--info", "--text", "in front",
    ]);
    until("terminal", 0.0, "zenity took the focus");
    assert_eq!(score("screen"), Some(1.0));
}

/// `accessibility_tree`: the desktop's UI tree in the XML OSWorld's server writes, scored
/// by OSWorld's own `check_accessibility_tree` (CSS selectors and XPath over its
/// namespaces, a text rule) and `check_left_panel` on a real GTK app, passing and failing
/// as the app comes and goes.
#[test]
fn the_accessibility_tree_is_the_xml_osworlds_metrics_select_in() {
    let sb = Sandbox::new();
    let rules = |rules: Value| {
        json!({"func": "check_accessibility_tree",
            "result": {"type": "accessibility_tree"},
            "expected": {"type": "rule", "rules": rules}})
    };
    let tasks = import_osworld_evaluators(
        &sb,
        "os",
        &[
            (
                "button",
                rules(json!([{"selectors": [
                    "application[name=zenity] push-button[name=\"OK\"][st|showing=\"true\"]"
                ]}])),
            ),
            (
                "label",
                rules(json!([{"selectors": ["label[st|visible=\"true\"]"],
                    "text": "PINCER label é", "exact": true}])),
            ),
            (
                "xpath",
                rules(json!([{"xpath":
                    "//application[@name='zenity']//push-button[@cp:screencoord and @cp:size]"}])),
            ),
            (
                "attributes",
                rules(json!([{"selectors": ["application[name=zenity] [attr|toolkit=\"gtk\"]"]}])),
            ),
            (
                "panel",
                json!({"func": "check_left_panel", "result": {"type": "accessibility_tree"}}),
            ),
        ],
    );
    let desktop = sb.desktop("osworld-tree", "1024x768", &[]);
    let env = desktop.name.as_str();
    let assets = sb.path().join("no files");
    let score = |task: &str| osworld_score(&sb, &tasks, Some(&assets), &format!("os/{task}"));
    let until = |task: &str, want: f64, what: &str| {
        let t = std::time::Instant::now();
        let mut last = None;
        while t.elapsed().as_secs() < 90 {
            last = Some(score(task));
            if last.as_ref().is_some_and(|(s, _)| *s == Some(want)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        panic!("{what}: os/{task} scored {last:?}, not {want}");
    };
    for task in ["button", "label", "xpath", "attributes"] {
        assert_eq!(score(task).0, Some(0.0), "{task} before zenity");
    }
    sb.pincer_ok(&[
        "launch",
        "--env",
        env,
        "--",
        "zenity",
        "--question",
        "--text",
        "PINCER label é",
        "--ok-label",
        "OK",
    ]);
    until("button", 1.0, "zenity's OK button showing");
    for task in ["label", "xpath", "attributes"] {
        assert_eq!(score(task).0, Some(1.0), "{task} with zenity");
    }
    // No LibreOffice Impress, so no "Slides View": the panel metric runs and finds none.
    assert_eq!(score("panel").0, Some(0.0));
    // zenity answers and exits: its nodes leave the tree.
    sb.pincer_ok(&["act", "--env", env, "key", "Return"]);
    until("button", 0.0, "zenity gone");
}

/// `update_browse_history` (chrome/44ee5668's setup): the empty Chrome history OSWorld
/// downloads (a stand-in here, for its file host: Chrome's `urls` and `visits` tables made
/// with sqlite3) put where Chrome keeps it and filled with the task's entries as OSWorld's
/// setup fills them, then read by OSWorld's own `history` getter and scored by its
/// `check_history_deleted`: failing as set up, passing once the YouTube visits are gone.
#[test]
fn the_browse_history_setup_fills_chromes_history_as_osworlds_does() {
    let sb = Sandbox::new();
    let folder = sb.path().join("OSWorld history é");
    std::fs::create_dir_all(folder.join("examples/chrome")).unwrap();
    let entries = json!([
        {"url": "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "title": "Rick Astley",
         "visit_time_from_now_in_seconds": 3600},
        {"url": "https://www.nytimes.com/", "title": "The New York Times",
         "visit_time_from_now_in_seconds": 300},
        {"url": "https://www.youtube.com/watch?v=9bZkp7q19f0",
         "title": "PSY - GANGNAM STYLE(강남스타일) M/V", "visit_time_from_now_in_seconds": 1631},
    ]);
    let task = json!({"id": "hist", "instruction": "-",
        "config": [{"type": "update_browse_history", "parameters": {"history": entries}}],
        "evaluator": {"func": "check_history_deleted",
            "result": {"type": "history", "dest": "history.sqlite"},
            "expected": {"type": "rule", "rules": {"type": "keywords", "keywords": ["youtube"]}}}});
    std::fs::write(folder.join("examples/chrome/hist.json"), task.to_string()).unwrap();
    std::fs::write(folder.join("test_all.json"), r#"{"chrome": ["hist"]}"#).unwrap();
    let tasks = sb.path().join("imported");
    let cache = sb.path().join("cache é");
    let report = sb.pincer_ok(&[
        "task",
        "import-osworld",
        folder.to_str().unwrap(),
        "--out",
        tasks.to_str().unwrap(),
        "--assets",
        cache.to_str().unwrap(),
        "--per-task",
    ]);
    assert!(
        report
            .lines()
            .any(|l| l.contains("chrome/hist") && l.contains("files")),
        "{report}"
    );
    // The stand-in for OSWorld's history_empty.sqlite, where OSWorld caches it.
    std::fs::create_dir_all(cache.join("hist")).unwrap();
    let sqlite = |db: &Path, sql: &str| {
        let out = Command::new("/usr/bin/python3")
            .args(["-c", "import sqlite3, sys, json\nc = sqlite3.connect(sys.argv[1])\nrows = c.execute(sys.argv[2]).fetchall()\nc.commit()\nprint(json.dumps(rows))"])
            .arg(db)
            .arg(sql)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let empty = cache.join("hist/history_new.sqlite");
    sqlite(
        &empty,
        "CREATE TABLE urls(id INTEGER PRIMARY KEY AUTOINCREMENT, url LONGVARCHAR, \
         title LONGVARCHAR, visit_count INTEGER DEFAULT 0 NOT NULL, typed_count INTEGER \
         DEFAULT 0 NOT NULL, last_visit_time INTEGER NOT NULL, hidden INTEGER DEFAULT 0 NOT NULL)",
    );
    sqlite(
        &empty,
        "CREATE TABLE visits(id INTEGER PRIMARY KEY AUTOINCREMENT, url INTEGER NOT NULL, \
         visit_time INTEGER NOT NULL, from_visit INTEGER, transition INTEGER DEFAULT 0 NOT NULL, \
         segment_id INTEGER, visit_duration INTEGER DEFAULT 0 NOT NULL)",
    );
    let _desktop = sb.desktop("osworld-history", "800x600", &["--no-wm"]);
    let check = |setup: bool| {
        let mut args = vec![
            "task",
            "check",
            "--tasks",
            tasks.to_str().unwrap(),
            "chrome/hist",
            "--json",
            "--assets",
            cache.to_str().unwrap(),
        ];
        if !setup {
            args.push("--no-setup");
        }
        let out = sb.pincer_ok(&args);
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
        v["score"].as_f64()
    };
    let now_chrome_us = || {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Chrome counts microseconds from 1601-01-01; the setup takes local time, as
        // OSWorld's does, so the offset from UTC is added.
        let offset = {
            let out = Command::new("date").arg("+%z").output().unwrap();
            let z = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            let sign = if z.starts_with('-') { -1.0 } else { 1.0 };
            let (h, m): (f64, f64) = (z[1..3].parse().unwrap(), z[3..5].parse().unwrap());
            sign * (h * 3600.0 + m * 60.0)
        };
        (unix + offset + 11_644_473_600.0) * 1e6
    };
    // As set up: the YouTube visits are there, so the task fails.
    assert_eq!(check(true), Some(0.0));
    let history = sb
        .path()
        .join("state/desktops/osworld-history/home/.config/google-chrome/Default/History");
    let rows = sqlite(
        &history,
        "SELECT u.url, u.title, u.visit_count, u.last_visit_time, v.visit_time, v.transition \
         FROM urls u JOIN visits v ON v.url = u.id ORDER BY u.id",
    );
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let now = now_chrome_us();
    for (row, e) in rows.iter().zip(entries.as_array().unwrap()) {
        assert_eq!(row[0], e["url"]);
        assert_eq!(row[1], e["title"]);
        assert_eq!(row[2], 1);
        assert_eq!(row[3], row[4]);
        assert_eq!(row[5], 805_306_368);
        let ago_s = (now - row[3].as_f64().unwrap()) / 1e6;
        let want = e["visit_time_from_now_in_seconds"].as_f64().unwrap();
        assert!(
            (ago_s - want).abs() < 120.0,
            "{row:?}: {ago_s} s ago, not {want}"
        );
    }
    // The agent's work: the YouTube visits deleted.
    sqlite(&history, "DELETE FROM urls WHERE url LIKE '%youtube%'");
    assert_eq!(check(false), Some(1.0));
}

/// Makes `talk.pptx` in `dir` with python-pptx from the scorer's environment: slide 1
/// carries an audio file (`voice.mp3`, ID3 title PINCER-AUDIO) as a relationship, slide 2
/// a background picture (`red.png`), both also left in `dir`, as LibreOffice saves them.
const SLIDES: &str = r#"
import sys
from lxml import etree
from mutagen.easyid3 import EasyID3
from mutagen.id3 import ID3
from PIL import Image
from pptx import Presentation
from pptx.opc.package import Part
from pptx.opc.packuri import PackURI
d = sys.argv[1]
Image.new("RGB", (64, 48), (200, 30, 30)).save(d + "/red.png")
with open(d + "/voice.mp3", "wb") as f:
    f.write(bytes(400))
ID3().save(d + "/voice.mp3")
tags = EasyID3(d + "/voice.mp3")
tags["title"] = "PINCER-AUDIO"
tags.save()
prs = Presentation()
first = prs.slides.add_slide(prs.slide_layouts[6])
second = prs.slides.add_slide(prs.slide_layouts[6])
with open(d + "/voice.mp3", "rb") as f:
    audio = Part(PackURI("/ppt/media/media1.mp3"), "audio/mpeg", prs.part.package, f.read())
first.part.relate_to(audio, "http://schemas.openxmlformats.org/officeDocument/2006/relationships/audio")
pic = second.shapes.add_picture(d + "/red.png", 0, 0)
rid = pic._element.blip_rId
bg = etree.fromstring(
    '<p:bg xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<p:bgPr><a:blipFill><a:blip r:embed="%s"/><a:stretch><a:fillRect/></a:stretch>'
    '</a:blipFill><a:effectLst/></p:bgPr></p:bg>' % rid)
second._element.cSld.insert(0, bg)
pic._element.getparent().remove(pic._element)
prs.save(d + "/talk.pptx")
"#;

/// `background_image_in_slide` and `audio_in_slide`: OSWorld's own getters, called in the
/// worker on the presentation fetched from the desktop, each scored by OSWorld's metric
/// (`compare_images` against the picture, `check_mp3_meta` on the audio's tags); a slide
/// without a background gives `None`, which scores 0.
#[test]
fn the_slide_getters_take_a_slides_background_and_audio_as_osworlds_do() {
    let sb = Sandbox::new();
    let slide = |kind: &str, index: u32, dest: &str| {
        json!({"type": kind, "ppt_file_path": "/home/user/Desktop/talk.pptx",
            "slide_index": index, "dest": dest})
    };
    let red = json!({"type": "vm_file", "path": "/home/user/Desktop/red.png", "dest": "red.png"});
    let tasks = import_osworld_evaluators(
        &sb,
        "multi_apps",
        &[
            (
                "background",
                json!({"func": "compare_images", "expected": red,
                    "result": slide("background_image_in_slide", 1, "bg.png")}),
            ),
            (
                "no-background",
                json!({"func": "compare_images", "expected": red,
                    "result": slide("background_image_in_slide", 0, "bg.png")}),
            ),
            (
                "audio",
                json!({"func": "check_mp3_meta",
                    "result": slide("audio_in_slide", 0, "voice.mp3"),
                    "expected": {"type": "rule", "rules":
                        {"title": {"method": "eq", "ref": "PINCER-AUDIO"}}}}),
            ),
            (
                "other-audio",
                json!({"func": "check_mp3_meta",
                    "result": slide("audio_in_slide", 0, "voice.mp3"),
                    "expected": {"type": "rule", "rules":
                        {"title": {"method": "eq", "ref": "someone else"}}}}),
            ),
        ],
    );
    let _desktop = sb.desktop("osworld-slides", "800x600", &["--no-wm"]);
    let desk = sb.path().join("state/desktops/osworld-slides/home/Desktop");
    std::fs::create_dir_all(&desk).unwrap();
    let made = Command::new(scorer_env().join("bin/python"))
        .args(["-c", SLIDES])
        .arg(&desk)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let assets = sb.path().join("no files");
    let score =
        |task: &str| osworld_score(&sb, &tasks, Some(&assets), &format!("multi_apps/{task}"));
    for (task, want) in [
        ("background", 1.0),
        ("no-background", 0.0),
        ("audio", 1.0),
        ("other-audio", 0.0),
    ] {
        let (got, detail) = score(task);
        assert_eq!(got, Some(want), "{task}: {detail}");
    }
}
