//! `--compat crab`: CRAB's tasks scored as CRAB's own code scores them, against pincer's
//! own scoring, on a real desktop (Xvfb, the desktop's agent, files and a clipboard owner
//! made there). Each end state below is one where the two differ (README, "CRAB's scoring
//! and pincer's"); `pincer task check --compat crab` must judge it as CRAB does and the
//! plain check as pincer does. Then CRAB's harness rules in `pincer run --compat crab`: a
//! wait is a step, `complete` ends the task unevaluated, an action CRAB lacks ends it, and
//! a task that did not come from CRAB is refused.

use pincer_tests::{Sandbox, import_crab, results};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// CRAB's task files imported, with CRAB's home (`/home/crab`) written as `home`: the
/// tasks as they would read on a machine whose user lives there.
fn imported(sb: &Sandbox, home: &str) -> PathBuf {
    let raw = import_crab(sb, "crab-import");
    let out = sb.path().join("crab tasks");
    std::fs::create_dir_all(&out).unwrap();
    for e in std::fs::read_dir(raw.join("ubuntu")).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            out.join(p.file_name().unwrap()),
            text.replace("/home/crab", home),
        )
        .unwrap();
    }
    out
}

/// Runs a shell command line on the desktop.
fn sh(sb: &Sandbox, env: &str, script: &str) {
    sb.pincer_ok(&["exec", "--env", env, "--", "sh", "-c", script]);
}

/// Starts a shell command line on the desktop that keeps running (a clipboard owner, a
/// process) and waits until `ready` (a shell test there) holds.
fn keep(sb: &Sandbox, env: &str, script: &str, ready: &str) {
    sb.pincer_ok(&["launch", "--env", env, "--", "sh", "-c", script]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !sb
        .pincer(&["exec", "--env", env, "--", "sh", "-c", ready])
        .status
        .success()
    {
        assert!(std::time::Instant::now() < deadline, "never ready: {ready}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// One checkpoint's verdict after `pincer task check --no-setup --json` (with `compat`):
/// `Some(passed)`, or `None` when the check raised (CRAB's `evaluator_exception`).
fn verdict(sb: &Sandbox, tasks: &Path, task: &str, node: &str, compat: bool) -> Option<bool> {
    let mut args = vec![
        "task",
        "check",
        task,
        "--tasks",
        tasks.to_str().unwrap(),
        "--bind",
        "desktop=fidelity",
        "--no-setup",
        "--json",
    ];
    if compat {
        args.extend(["--compat", "crab"]);
    }
    let out: Value = serde_json::from_str(&sb.pincer_ok(&args)).unwrap();
    let c = out["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == node)
        .unwrap_or_else(|| panic!("no checkpoint {node}: {out}"))
        .clone();
    c["passed"].as_bool()
}

/// An end state on which CRAB and pincer disagree.
struct Case {
    what: &'static str,
    task: &'static str,
    node: &'static str,
    /// Makes the state (a shell line on the desktop; `$HOME` is the tasks' home).
    make: &'static str,
    /// What must keep running in that state, and the shell test that says it does.
    keep: Option<(&'static str, &'static str)>,
    /// pincer's verdict, then CRAB's (`None`: CRAB's check raises).
    pincer: Option<bool>,
    crab: Option<bool>,
}

/// A Writer document whose body is `$1` (OpenDocument XML), written to `$2`.
const ODT: &str = r#"python3 - "$@" <<'EOF'
import sys, zipfile
body, path = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(path, "w") as z:
    z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
    z.writestr("content.xml", '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>' + body + '</office:text></office:body></office:document-content>')
EOF"#;

#[test]
fn crab_compat_judges_end_states_as_crabs_code_does_and_plain_checks_as_pincer_does() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("fidelity", "1024x768", &[]);
    let home = sb
        .pincer_ok(&[
            "exec",
            "--env",
            "fidelity",
            "--",
            "sh",
            "-c",
            "printf %s \"$HOME\"",
        ])
        .trim()
        .to_owned();
    let tasks = imported(&sb, &home);
    let odt = |body: &str, path: &str| format!("sh -s -- '{body}' \"{path}\" <<'SH'\n{ODT}\nSH");
    let writer_empty = format!(
        "mkdir -p $HOME/Documents && {}",
        odt(
            "<text:p>anything</text:p>",
            "$HOME/Documents/clipboard_text.odt"
        )
    );
    let writer_heading = odt(
        "<text:h>Title</text:h>",
        "$HOME/Documents/clipboard_text.odt",
    );
    let cases = [
        Case {
            what: "copy-files: an extra .py in the target",
            task: "22f05f6f-6aef-4786-958f-14f559eaf014",
            node: "s0.copied",
            keep: None,
            make: "rm -rf $HOME/crab $HOME/example_code; mkdir -p $HOME/crab/examples $HOME/example_code && echo a > $HOME/crab/examples/a.py && cp $HOME/crab/examples/a.py $HOME/example_code/ && echo old > $HOME/example_code/old.py",
            pincer: Some(true),
            crab: Some(false),
        },
        Case {
            what: "copy-files: no .py to copy, the target made",
            task: "22f05f6f-6aef-4786-958f-14f559eaf014",
            node: "s0.copied",
            keep: None,
            make: "rm -rf $HOME/crab $HOME/example_code; mkdir -p $HOME/crab/examples $HOME/example_code && echo notes > $HOME/crab/examples/README.txt",
            pincer: Some(false),
            crab: Some(true),
        },
        Case {
            what: "copy-files: the source directory missing",
            task: "22f05f6f-6aef-4786-958f-14f559eaf014",
            node: "s0.copied",
            keep: None,
            make: "rm -rf $HOME/crab $HOME/example_code; mkdir -p $HOME/example_code",
            pincer: Some(false),
            crab: None,
        },
        Case {
            what: "vim-write-file: a process named nvim",
            task: "05d0e137-7d97-4021-9477-6490a2154c81",
            node: "s0.vim-open",
            make: "mkdir -p $HOME/bin && cp /bin/sleep $HOME/bin/nvim",
            keep: Some(("exec $HOME/bin/nvim 300", "pgrep -x nvim")),
            pincer: Some(false),
            crab: Some(true),
        },
        Case {
            what: "vscode-paste: the file shorter than the clipboard",
            task: "8afc25eb-7a80-459f-acdc-5c79fc146c29",
            node: "s0.pasted",
            make: "mkdir -p $HOME/assets && printf 'line one' > $HOME/assets/content_2.txt",
            keep: Some((
                "printf 'line one\\nline two' | xclip -selection clipboard -quiet",
                "xclip -o -selection clipboard | grep -q 'line two'",
            )),
            pincer: Some(false),
            crab: Some(true),
        },
        Case {
            what: "writer-paste: an empty clipboard",
            task: "4ae4e35f-d90a-48cc-8fb9-492ac7ae07ee",
            node: "s0.pasted",
            make: Box::leak(writer_empty.into_boxed_str()),
            keep: Some((
                "xclip -selection clipboard -quiet -i /dev/null",
                "xclip -o -selection clipboard -t TARGETS",
            )),
            pincer: Some(false),
            crab: Some(true),
        },
        Case {
            what: "writer-paste: the clipboard's line only in a heading",
            task: "4ae4e35f-d90a-48cc-8fb9-492ac7ae07ee",
            node: "s0.pasted",
            make: Box::leak(writer_heading.into_boxed_str()),
            keep: Some((
                "printf Title | xclip -selection clipboard -quiet",
                "xclip -o -selection clipboard | grep -qx Title",
            )),
            pincer: Some(true),
            crab: Some(false),
        },
    ];
    for c in &cases {
        sh(&sb, "fidelity", c.make);
        if let Some((script, ready)) = c.keep {
            keep(&sb, "fidelity", script, ready);
        }
        let pincer = verdict(&sb, &tasks, c.task, c.node, false);
        let crab = verdict(&sb, &tasks, c.task, c.node, true);
        assert_eq!(
            (pincer, crab),
            (c.pincer, c.crab),
            "{}: (pincer, CRAB)",
            c.what
        );
    }
    sh(&sb, "fidelity", "pkill -x nvim; pkill -x xclip; true");
}

/// CRAB's harness in `pincer run --compat crab`, on a real desktop with the oracle agent
/// replaying scripted actions: a submit after waits that use up CRAB's step limit,
/// `complete` before anything passed, an infeasible claim; and the refusal of pincer's own
/// tasks. The same tasks without `--compat` end as pincer ends them.
#[test]
fn crab_compat_runs_under_crabs_harness_rules() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("harness", "800x600", &[]);
    let tasks = imported(&sb, "/home/crab");
    let submit = "0a893c2e-eec5-47cc-a930-eb01c5f17683";
    let original: Value = serde_json::from_str(
        &std::fs::read_to_string(tasks.join(format!("{submit}.json"))).unwrap(),
    )
    .unwrap();
    let answer = original["compat"]["crab"][0]["args"]["text"].clone();
    let dir = sb.path().join("scripted");
    std::fs::create_dir_all(&dir).unwrap();
    let variant = |id: &str, oracle: Value, max_steps: u32| {
        let mut t = original.clone();
        t["id"] = id.into();
        t["oracle"] = oracle;
        t["limits"]["max_steps"] = max_steps.into();
        std::fs::write(dir.join(format!("{id}.json")), t.to_string()).unwrap();
    };
    let wait = json!({"do": "sleep", "ms": 10});
    variant(
        "waits-then-submit",
        json!([wait, wait, {"do": "submit", "answer": answer}]),
        3,
    );
    variant("complete-first", json!([{"do": "complete"}]), 20);
    variant(
        "infeasible",
        json!([{"do": "infeasible", "reason": "no"}]),
        20,
    );
    let run = |name: &str, compat: bool| -> Vec<(String, String, Option<String>)> {
        let out = sb.path().join(name);
        let mut args = vec![
            "run",
            "--tasks",
            dir.to_str().unwrap(),
            "--agent",
            "oracle",
            "--set",
            "desktop=harness",
            "--out",
            out.to_str().unwrap(),
        ];
        if compat {
            args.extend(["--compat", "crab"]);
        }
        let log = sb.pincer_ok(&args);
        // The summary and the report say which scoring made the records.
        let line = "scored as CRAB scores it (--compat crab): 3 task runs, 0 success";
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert_eq!(log.contains(line), compat, "{log}");
        assert_eq!(
            report.contains(&format!("- **scoring**: {line}")),
            compat,
            "{report}"
        );
        let mut recs: Vec<_> = results(&out)
            .iter()
            .map(|r| {
                (
                    r["task"].as_str().unwrap().to_owned(),
                    r["termination"].as_str().unwrap().to_owned(),
                    r["compat"]["reason"].as_str().map(str::to_owned),
                )
            })
            .collect();
        recs.sort();
        recs
    };
    let s = |x: &str| x.to_owned();
    assert_eq!(
        run("pincer", false),
        [
            (s("complete-first"), s("false-completion"), None),
            (s("infeasible"), s("infeasible"), None),
            (s("waits-then-submit"), s("success"), None),
        ]
    );
    assert_eq!(
        run("crab", true),
        [
            (
                s("complete-first"),
                s("false-completion"),
                Some(s("agent_complete"))
            ),
            (
                s("infeasible"),
                s("invalid-action"),
                Some(s("env_exception"))
            ),
            (
                s("waits-then-submit"),
                s("step-limit"),
                Some(s("reach_max_step"))
            ),
        ]
    );
    // pincer's own tasks have no CRAB score to reproduce.
    let out = sb.pincer(&[
        "run",
        "--tasks",
        "demo",
        "--agent",
        "oracle",
        "--set",
        "desktop=harness",
        "--compat",
        "crab",
        "--no-report",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("did not come from CRAB's files"),
        "{err}"
    );
}
