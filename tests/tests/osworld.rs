//! OSWorld on pincer, end to end through the real binary: its task files imported, and
//! end states on a real local desktop scored by pincer (`pincer task check --no-setup
//! --json`: pincer's getters over the guest protocol, OSWorld's metrics in the sandboxed
//! scorer) and by OSWorld's own `DesktopEnv.evaluate()` with its own getters and metrics
//! (`tests/osworld/lab.py`, from the pinned desktop-env): the scores must agree.
//!
//! Needs the scorer's environment (`pincer osworld setup`; `./run.sh test` makes it).

use pincer_tests::Sandbox;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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

/// pincer's score for a case: `Some(score)`, or `None` when it could not score.
fn pincer_score(sb: &Sandbox, tasks: &Path, assets: &Path, task: &str) -> (Option<f64>, Value) {
    let out = sb.pincer_ok(&[
        "task",
        "check",
        "--tasks",
        tasks.to_str().unwrap(),
        task,
        "--no-setup",
        "--json",
        "--assets",
        assets.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    (v["score"].as_f64(), v)
}

#[test]
fn pincer_scores_end_states_exactly_as_osworlds_own_code() {
    let sb = Sandbox::new();
    let mut lab = Lab::start();
    let folder = sb.path().join("osworld examples");
    let prepared = lab.ask(json!({"op": "prepare", "out": folder,
        "fixture": repo().join("../shared/fixtures/osworld-2024/evaluation_examples")}));
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
        let (ours, detail) = pincer_score(&sb, &tasks, &assets, task);
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
