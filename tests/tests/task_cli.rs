//! `pincer task ...` end to end, through the real binary: listing, showing, validating,
//! graphs, the function and schema catalogues, seeded composition, the CRAB import of the
//! vendored Benchmark-v0 files, and `task check` against a real local desktop.

use pincer_tests::Sandbox;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The repository root (this crate is `tests/`).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `pincer ARGS`, insisting it fails; returns stdout and stderr together.
fn pincer_err(sb: &Sandbox, args: &[&str]) -> String {
    let out = sb.pincer(args);
    assert!(
        !out.status.success(),
        "pincer {args:?} should fail:\n{}",
        stdout(&out)
    );
    format!("{}{}", stdout(&out), stderr(&out))
}

/// A valid task on one desktop: setup writes a file; one checkpoint holds after setup, one
/// (waiting for the first) does not, and an agent-log one never does before the agent acts.
fn good_task(id: &str) -> Value {
    json!({
        "id": id,
        "instruction": "Append a line to the notes.",
        "envs": {"desktop": {"platform": "linux"}},
        "setup": {"desktop": [
            {"do": "write_file", "path": "~/cli/notes.txt", "content": "first line\n"}
        ]},
        "checkpoints": [
            {"id": "present", "env": "desktop", "check": "file_exists",
             "args": {"path": "~/cli/notes.txt"}},
            {"id": "appended", "env": "desktop", "check": "file_contains",
             "args": {"path": "~/cli/notes.txt", "text": "second line"}, "after": ["present"]},
            {"id": "typed", "check": "typed_contains", "args": {"text": "second line"}}
        ]
    })
}

fn write_json(path: &Path, v: &Value) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

#[test]
fn list_and_show_the_bundled_tasks() {
    let sb = Sandbox::new();
    let list = sb.pincer_ok(&["task", "list", "--tasks", "demo"]);
    let head = list.lines().next().unwrap();
    assert!(
        head.starts_with("id") && head.contains("class") && head.contains("instruction"),
        "{list}"
    );
    assert!(
        list.contains("cross-copy-access-code") && list.contains("cross-environment"),
        "{list}"
    );
    let count: usize = list
        .lines()
        .last()
        .and_then(|l| l.strip_suffix(" tasks"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count line:\n{list}"));
    assert_eq!(count, list.lines().count() - 2, "{list}");

    let shown = sb.pincer_ok(&["task", "show", "example-note-in-mousepad"]);
    let task: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(task["id"], "example-note-in-mousepad");
    assert_eq!(task["checkpoints"].as_array().unwrap().len(), 4);

    let e = pincer_err(&sb, &["task", "show", "no-such-task"]);
    assert!(
        e.contains("no task 'no-such-task'") && e.contains("example-note-in-mousepad"),
        "{e}"
    );
}

#[test]
fn validate_accepts_a_good_directory_and_names_what_is_wrong_in_a_bad_file() {
    let sb = Sandbox::new();
    let good = sb.path().join("good");
    write_json(&good.join("a.json"), &good_task("cli-a"));
    write_json(&good.join("more/b.json"), &good_task("cli-b"));
    let out = sb.pincer_ok(&["task", "validate", "--tasks", good.to_str().unwrap()]);
    assert!(out.contains("ok   cli-a (3 checkpoints)"), "{out}");
    assert!(out.contains("all 2 tasks are valid"), "{out}");

    // A type error: the file, the path inside it and what was expected.
    let bad = sb.path().join("bad/steps.json");
    let mut t = good_task("cli-bad");
    t["limits"] = json!({"max_steps": "ten"});
    write_json(&bad, &t);
    let e = pincer_err(&sb, &["task", "validate", "--tasks", bad.to_str().unwrap()]);
    assert!(e.contains("bad/steps.json"), "{e}");
    assert!(e.contains("at `limits.max_steps`"), "{e}");
    assert!(
        e.contains("invalid type: string \"ten\", expected u32"),
        "{e}"
    );

    // A graph error: the task loads, validation lists every problem.
    let cyclic = sb.path().join("cyclic/c.json");
    let mut t = good_task("cli-cycle");
    t["checkpoints"][0]["after"] = json!(["appended"]);
    t["checkpoints"][2]["args"]["env"] = json!("phone");
    write_json(&cyclic, &t);
    let e = pincer_err(
        &sb,
        &["task", "validate", "--tasks", cyclic.to_str().unwrap()],
    );
    assert!(e.contains("FAIL") && e.contains("cyclic/c.json"), "{e}");
    assert!(
        e.contains("the checkpoints appended -> present -> appended form a cycle"),
        "{e}"
    );
    assert!(
        e.contains("typed_contains names environment 'phone'"),
        "{e}"
    );
    assert!(e.contains("1 of 1 tasks are invalid"), "{e}");

    // An oracle that uses a value before reading it.
    let oracle = sb.path().join("oracle/o.json");
    let mut t = good_task("cli-oracle");
    t["oracle"] = json!([{"do": "type", "text": "echo {{code}}"}]);
    write_json(&oracle, &t);
    let e = pincer_err(
        &sb,
        &["task", "validate", "--tasks", oracle.to_str().unwrap()],
    );
    assert!(
        e.contains("task 'cli-oracle': oracle step 1 uses {{code}} before a `read` step sets it"),
        "{e}"
    );
}

/// Files named on the command line are each validated; one that does not load is reported
/// and the rest still checked; every error says each thing once.
#[test]
fn validate_takes_files_and_says_each_thing_once() {
    let sb = Sandbox::new();
    let a = sb.path().join("a.json");
    let b = sb.path().join("b.json");
    write_json(&a, &good_task("cli-a"));
    write_json(&b, &good_task("cli-b"));
    let out = sb.pincer_ok(&["task", "validate", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(
        out.contains("ok   cli-a") && out.contains("ok   cli-b"),
        "{out}"
    );
    assert!(out.contains("all 2 tasks are valid"), "{out}");

    let missing = sb.path().join("missing.json");
    let run = sb.pincer(&[
        "task",
        "validate",
        a.to_str().unwrap(),
        missing.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(!run.status.success());
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stdout.contains("ok   cli-b"),
        "the file after the bad one was not checked: {stdout}"
    );
    assert!(stderr.contains("1 of 3 tasks are invalid"), "{stderr}");
    assert!(stdout.contains("missing.json"), "{stdout}");

    // A file that cannot be read: the OS's reason once, not once per layer that passed it on.
    let garbled = sb.path().join("garbled.json");
    std::fs::write(&garbled, b"{\"id\": \"\xff\xfe\"}").unwrap();
    let e = pincer_err(&sb, &["task", "list", "--tasks", garbled.to_str().unwrap()]);
    assert!(e.contains("garbled.json"), "{e}");
    assert_eq!(e.matches("valid UTF-8").count(), 1, "{e}");
}

#[test]
fn graphs_export_as_dot_and_mermaid() {
    let sb = Sandbox::new();
    let dot = sb.pincer_ok(&[
        "task",
        "graph",
        "example-note-in-mousepad",
        "--format",
        "dot",
    ]);
    assert!(
        dot.starts_with("digraph \"example-note-in-mousepad\" {"),
        "{dot}"
    );
    assert!(dot.contains("\"typed\" -> \"saved\";"), "{dot}");
    assert!(dot.contains("file_exists(desktop)"), "{dot}");
    assert!(dot.trim_end().ends_with('}'), "{dot}");
    let mermaid = sb.pincer_ok(&[
        "task",
        "graph",
        "example-note-in-mousepad",
        "--format",
        "mermaid",
    ]);
    assert!(mermaid.starts_with("flowchart LR"), "{mermaid}");
    assert!(
        mermaid.contains("n0 --> n1") && mermaid.contains("n1 --> n3"),
        "{mermaid}"
    );
    assert!(mermaid.contains("typed_contains(agent)"), "{mermaid}");
}

#[test]
fn functions_and_the_schema_are_printed() {
    let sb = Sandbox::new();
    let f = sb.pincer_ok(&["task", "functions"]);
    for name in [
        "file_exists",
        "typed_contains",
        "command_output_matches",
        "not",
    ] {
        assert!(
            f.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{f}"
        );
    }
    assert!(f.contains("e.g. {\"path\": \"~/notes.txt\"}"), "{f}");
    let with = sb.pincer_ok(&["task", "functions", "--schemas"]);
    assert!(with.contains("\"ignore_case\""), "{with}");
    let schema: Value = serde_json::from_str(&sb.pincer_ok(&["task", "schema"])).unwrap();
    assert_eq!(schema["title"], "Task");
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for field in ["id", "instruction", "envs", "checkpoints"] {
        assert!(required.contains(&field), "{required:?}");
    }
}

#[test]
fn compose_is_reproducible_by_seed() {
    let sb = Sandbox::new();
    let compose = |seed: &str| {
        sb.pincer_ok(&[
            "task",
            "compose",
            "--templates",
            "read-file,write-text",
            "--seed",
            seed,
        ])
    };
    let a = compose("7");
    assert_eq!(a, compose("7"), "the same seed gives the same task");
    let task: Value = serde_json::from_str(&a).unwrap();
    assert_eq!(task["id"], "read-file+write-text-seed7");
    let others: std::collections::BTreeSet<String> =
        (1..6).map(|s| compose(&s.to_string())).collect();
    assert!(
        others.len() >= 4 && !others.contains(&a),
        "different seeds give different tasks"
    );

    // A written instruction, and the task written to a file that validates.
    let out = sb.path().join("composed.json");
    let said = sb.pincer_ok(&[
        "task",
        "compose",
        "--templates",
        "make-file,remove-file",
        "--seed",
        "3",
        "--instruction",
        "Tidy up.",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(said.contains("written to"), "{said}");
    let task: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(task["instruction"], "Tidy up.");
    let v = sb.pincer_ok(&["task", "validate", "--tasks", out.to_str().unwrap()]);
    assert!(v.contains("all 1 tasks are valid"), "{v}");

    // A CRAB template by id prefix draws from the CRAB pools.
    let crab = sb.pincer_ok(&["task", "compose", "--templates", "217ababc", "--seed", "2"]);
    let task: Value = serde_json::from_str(&crab).unwrap();
    assert!(
        task["instruction"]
            .as_str()
            .unwrap()
            .contains("copy all files"),
        "{crab}"
    );

    // Refusals say why.
    let e = pincer_err(
        &sb,
        &["task", "compose", "--templates", "remove-file,make-file"],
    );
    assert!(e.contains("cannot feed"), "{e}");
    let e = pincer_err(&sb, &["task", "compose", "--templates", "a313ea4d"]);
    assert!(
        e.contains("could be any of") && e.contains("download-url"),
        "{e}"
    );
    let e = pincer_err(
        &sb,
        &[
            "task",
            "compose",
            "--templates",
            "a313ea4d-e501-4971-b4fe-db2aad19eac1",
        ],
    );
    assert!(
        e.contains("marked unsupported") && e.contains("live web"),
        "{e}"
    );
}

#[test]
fn import_crab_reports_and_writes_the_vendored_benchmark() {
    let sb = Sandbox::new();
    let dir = repo().join("fixtures/crab-benchmark-v0");
    let out = sb.path().join("crab");
    let report = sb.pincer_ok(&[
        "task",
        "import-crab",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let total: Vec<&str> = report
        .lines()
        .find(|l| l.starts_with("total"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(total, ["total", "123", "123", "39", "84", "0"], "{report}");
    assert!(
        report.contains("37 of the 123 converted files link a sub-task"),
        "{report}"
    );
    assert!(
        report.contains("123 converted tasks written to"),
        "{report}"
    );
    let written: usize = ["android", "ubuntu", "cross"]
        .iter()
        .map(|g| std::fs::read_dir(out.join(g)).unwrap().count())
        .sum();
    assert_eq!(written, 123);
    // The written tasks load and validate as a task directory.
    let v = sb.pincer_ok(&["task", "validate", "--tasks", out.to_str().unwrap()]);
    assert!(v.contains("all 123 tasks are valid"), "{v}");
}

#[test]
fn check_prints_every_checkpoint_on_a_live_desktop() {
    let sb = Sandbox::new();
    let dir = sb.path().join("tasks");
    write_json(&dir.join("cli-check.json"), &good_task("cli-check"));
    let tasks = dir.to_str().unwrap();
    let _desktop = sb.desktop("cli-check", "800x600", &["--no-wm"]);

    // Setup writes the file: the first checkpoint holds, the others do not, and every
    // checkpoint is read, ready or not.
    let out = sb.pincer_ok(&["task", "check", "cli-check", "--tasks", tasks]);
    assert!(out.contains("setup desktop:"), "{out}");
    assert!(
        out.contains("PASS present: file ~/cli/notes.txt exists (11 bytes)"),
        "{out}"
    );
    assert!(
        out.contains("fail appended (after present): file ~/cli/notes.txt reads 'first line"),
        "{out}"
    );
    assert!(
        out.contains("fail typed: the agent has typed nothing"),
        "{out}"
    );
    assert!(out.contains("3 checkpoints read in"), "{out}");

    // Without setup, on a desktop where the file was removed, nothing holds.
    sb.pincer_ok(&["exec", "--", "sh", "-c", "rm -r ~/cli"]);
    let out = sb.pincer_ok(&["task", "check", "cli-check", "--tasks", tasks, "--no-setup"]);
    assert!(!out.contains("setup desktop:"), "{out}");
    assert!(
        out.contains("fail present: file ~/cli/notes.txt does not exist"),
        "{out}"
    );

    let e = pincer_err(&sb, &["task", "check", "no-such", "--tasks", tasks]);
    assert!(e.contains("no task 'no-such'"), "{e}");

    // An answer is judged as if the agent had submitted it.
    let mut asked = good_task("cli-answer");
    asked["checkpoints"] = json!([
        {"id": "answer", "check": "answer_equals", "args": {"text": "42"}}
    ]);
    write_json(&dir.join("cli-answer.json"), &asked);
    let out = sb.pincer_ok(&["task", "check", "cli-answer", "--tasks", tasks]);
    assert!(
        out.contains("fail answer: the agent has not submitted an answer"),
        "{out}"
    );
    let out = sb.pincer_ok(&[
        "task",
        "check",
        "cli-answer",
        "--tasks",
        tasks,
        "--answer",
        " 42 ",
    ]);
    assert!(out.contains("PASS answer"), "{out}");
    let out = sb.pincer_ok(&[
        "task",
        "check",
        "cli-answer",
        "--tasks",
        tasks,
        "--answer",
        "41",
    ]);
    assert!(out.contains("fail answer"), "{out}");
}

#[test]
fn check_repeats_setups_and_names_the_rounds_that_failed() {
    let sb = Sandbox::new();
    let dir = sb.path().join("tasks");
    let tasks = dir.to_str().unwrap();
    let _desktop = sb.desktop("cli-repeat", "800x600", &["--no-wm"]);

    // A setup that holds every time.
    let mut steady = good_task("steady");
    steady["checkpoints"] = json!([
        {"id": "written", "env": "desktop", "check": "file_contains",
         "args": {"path": "~/cli/notes.txt", "text": "second line"}}
    ]);
    write_json(&dir.join("steady.json"), &steady);
    let out = sb.pincer_ok(&["task", "check", "steady", "--tasks", tasks, "--repeat", "3"]);
    assert_eq!(out.matches("  ok  ").count(), 3, "{out}");
    assert!(out.contains("3 of 3 set-ups good"), "{out}");
    assert!(out.contains("checkpoints read: first "), "{out}");
    assert!(out.contains("0/1 checkpoints pass"), "{out}");

    // A setup that works once only: rounds 2 and 3 fail and are named.
    let mut once = steady.clone();
    once["id"] = json!("once");
    once["setup"] = json!({"desktop": [
        {"do": "exec", "argv": ["sh", "-c", "test ! -e ~/cli/flag && mkdir -p ~/cli && touch ~/cli/flag"]}
    ]});
    write_json(&dir.join("once.json"), &once);
    let e = pincer_err(
        &sb,
        &["task", "check", "once", "--tasks", tasks, "--repeat", "3"],
    );
    assert!(e.contains("1 of 3 set-ups good"), "{e}");
    assert!(e.contains("2 of 3 set-ups failed (rounds 2, 3)"), "{e}");
    assert!(
        e.contains("  2/3  FAIL") && e.contains("setup step 0"),
        "{e}"
    );

    // A setup after which a starting checkpoint already holds is broken too.
    write_json(&dir.join("good.json"), &good_task("good"));
    let e = pincer_err(
        &sb,
        &["task", "check", "good", "--tasks", tasks, "--repeat", "2"],
    );
    assert!(e.contains("already passing: present"), "{e}");
    assert!(e.contains("0 of 2 set-ups good"), "{e}");
    let e = pincer_err(
        &sb,
        &["task", "check", "good", "--tasks", tasks, "--repeat", "0"],
    );
    assert!(e.contains("--repeat"), "{e}");
}

#[test]
fn import_osworld_reports_and_writes_the_vendored_369_tasks() {
    let sb = Sandbox::new();
    let dir = repo().join("fixtures/osworld-2024/evaluation_examples");
    let out = sb.path().join("osworld");
    let empty_cache = sb.path().join("no files yet");
    let report = sb.pincer_ok(&[
        "task",
        "import-osworld",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--assets",
        empty_cache.to_str().unwrap(),
    ]);
    // imported, offline, files present, files missing, web, account, not supported.
    let all: Vec<&str> = report
        .lines()
        .find(|l| l.starts_with("all"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(
        all,
        ["all", "369", "64", "0", "234", "58", "8", "5"],
        "{report}"
    );
    assert!(report.contains("369 tasks written to"), "{report}");
    // Ids repeat across domains (11 chrome and thunderbird tasks share theirs): a task is
    // its domain and id, so all 369 are written.
    let written: usize = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|d| std::fs::read_dir(d.path()).unwrap().count())
        .sum();
    assert_eq!(written, 369);
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(".osworld-import.json")).unwrap())
            .unwrap();
    assert_eq!(summary["tasks"].as_array().unwrap().len(), 369);
    // What pincer supports validates; what it does not is named, not failed.
    let v = sb.pincer_ok(&["task", "validate", "--tasks", out.to_str().unwrap()]);
    assert!(
        v.contains("tasks are valid;") && v.contains("use what pincer does not support"),
        "{v}"
    );
    // A malformed task file is named with its field.
    let bad = sb.path().join("bad");
    std::fs::create_dir_all(bad.join("examples/os")).unwrap();
    std::fs::write(bad.join("test_all.json"), r#"{"os": ["x"]}"#).unwrap();
    std::fs::write(
        bad.join("examples/os/x.json"),
        r#"{"id": "x", "evaluator": {}}"#,
    )
    .unwrap();
    let e = pincer_err(&sb, &["task", "import-osworld", bad.to_str().unwrap()]);
    assert!(
        e.contains("examples/os/x.json") && e.contains("at `evaluator`: missing field `func`"),
        "{e}"
    );
}
