//! The bundled benchmark `demo`, the main job: its shape (enough tasks, cross-environment
//! ones, apps covered, an oracle and a multi-node graph each), the oracle solving every task
//! on real local desktops, the random baseline scoring about nothing, and the report of a
//! real run rendered by `pincer report`.

use pincer::eval::functions::Library;
use pincer::eval::graph::Graph;
use pincer::task::{self, Task};
use pincer_tests::{Sandbox, results};
use serde_json::Value;
use std::collections::BTreeSet;

fn demo() -> Vec<Task> {
    task::load_path("demo")
        .expect("the bundled suite loads")
        .tasks
        .into_iter()
        .map(|(t, _)| t)
        .collect()
}

#[test]
fn the_demo_suite_has_the_promised_shape() {
    let tasks = demo();
    assert!(tasks.len() >= 12, "only {} tasks", tasks.len());
    let lib = Library::standard();
    for t in &tasks {
        let graph = Graph::build(t, &lib).unwrap_or_else(|e| panic!("{}: {e}", t.id));
        assert!(
            graph.len() >= 2,
            "{}: a multi-node graph, not {}",
            t.id,
            graph.len()
        );
        let oracle = t
            .oracle
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no oracle", t.id));
        task::oracle::check(oracle).unwrap_or_else(|e| panic!("{}: {e}", t.id));
        assert!(
            t.tags.iter().any(|g| g == "demo"),
            "{} lacks the demo tag",
            t.id
        );
    }
    let cross: Vec<&Task> = tasks.iter().filter(|t| t.envs.len() >= 2).collect();
    assert!(cross.len() >= 3, "cross-environment tasks: {}", cross.len());
    // A cross-environment task reads on one desktop and acts on the other: its solution
    // touches both, and a value read on one is used on the other.
    for t in &cross {
        let json = serde_json::to_value(t.oracle.as_ref().unwrap()).unwrap();
        let envs: BTreeSet<&str> = json
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["env"].as_str())
            .collect();
        assert_eq!(envs.len(), t.envs.len(), "{}: oracle uses {envs:?}", t.id);
        assert!(
            json.as_array().unwrap().iter().any(|s| s["do"] == "read"),
            "{}: the oracle carries a value it read, not one written into the task",
            t.id
        );
    }
    // The apps the issue names: editor, terminal, file manager, calculator, office, settings.
    let tags: BTreeSet<&str> = tasks
        .iter()
        .flat_map(|t| t.tags.iter().map(String::as_str))
        .collect();
    for app in [
        "editor",
        "terminal",
        "files",
        "calculator",
        "office",
        "settings",
    ] {
        assert!(tags.contains(app), "no task tagged '{app}': {tags:?}");
    }
}

#[test]
fn the_oracle_solves_every_demo_task_and_the_random_agent_does_not() {
    let sb = Sandbox::new();
    let tasks = demo();
    let out = sb.path().join("oracle");
    let stdout = sb.pincer_ok(&[
        "run",
        "--tasks",
        "demo",
        "--agent",
        "oracle",
        "--out",
        out.to_str().unwrap(),
        "--no-report",
    ]);
    let recs = results(&out);
    assert_eq!(recs.len(), tasks.len(), "{stdout}");
    let failed: Vec<&Value> = recs
        .iter()
        .filter(|r| r["termination"] != "success")
        .collect();
    assert!(failed.is_empty(), "the oracle failed: {failed:#?}");
    assert!(recs.iter().all(|r| r["passed"] == r["total"]));

    // The report of that real run, written by the CLI.
    let report = sb.pincer_ok(&["report", out.to_str().unwrap()]);
    assert!(report.contains("report.html"), "{report}");
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    for t in &tasks {
        assert!(html.contains(&t.id), "report.html lacks {}", t.id);
        assert!(md.contains(&t.id), "report.md lacks {}", t.id);
    }
    // Trajectory images are embedded, so the HTML stands alone.
    assert!(html.contains("data:image/jpeg;base64,"));

    // The random baseline on the same suite: tasks a random agent passes are too easy.
    let out = sb.path().join("random");
    sb.pincer_ok(&[
        "run",
        "--tasks",
        "demo",
        "--agent",
        "random",
        "--seed",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--no-report",
    ]);
    let recs = results(&out);
    assert_eq!(recs.len(), tasks.len());
    let passed: Vec<&str> = recs
        .iter()
        .filter(|r| r["termination"] == "success")
        .map(|r| r["task"].as_str().unwrap())
        .collect();
    assert!(passed.is_empty(), "the random agent solved {passed:?}");
    // It did act: its runs ended by its own doing, not by broken setups.
    assert!(
        recs.iter()
            .all(|r| r["termination"] != "broken-setup" && r["termination"] != "environment-error"),
        "{recs:#?}"
    );
}

/// Two local desktops share nothing per-user, whatever the caller's environment says: with
/// the caller's XDG directories (and its session's display and bus) set, as in many
/// people's shells, the cross-environment tasks still start from two separate settings
/// databases. Before each desktop got its own, `cross-sync-color-scheme` ended in
/// `broken-setup` here: its checkpoint passed before the agent acted, the two desktops
/// writing one dconf database.
#[test]
fn cross_environment_tasks_pass_with_the_callers_xdg_directories_set() {
    let sb = Sandbox::new();
    let shared = sb.path().join("caller");
    let out = sb.path().join("cross");
    let mut cmd = sb.pincer_command(&[
        "run",
        "--tasks",
        "demo",
        "--agent",
        "oracle",
        "--tag",
        "cross",
        "--out",
        out.to_str().unwrap(),
        "--no-report",
    ]);
    cmd.env("HOME", &shared);
    for (var, sub) in [
        ("XDG_CONFIG_HOME", "config"),
        ("XDG_DATA_HOME", "data"),
        ("XDG_CACHE_HOME", "cache"),
        ("XDG_STATE_HOME", "state"),
        ("XDG_RUNTIME_DIR", "runtime"),
    ] {
        let dir = shared.join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        cmd.env(var, dir);
    }
    cmd.env("WAYLAND_DISPLAY", "wayland-nowhere")
        .env("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus");
    let run = cmd.output().expect("run pincer");
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let recs = results(&out);
    let cross = demo().into_iter().filter(|t| t.envs.len() >= 2).count();
    assert_eq!(recs.len(), cross, "{recs:#?}");
    for r in &recs {
        assert_eq!(r["termination"], "success", "{r:#}");
    }
    // Nothing of the desktops landed in the caller's directories.
    assert!(
        !shared.join("config/dconf").exists(),
        "a desktop wrote the caller's dconf database"
    );
}

/// `pincer demo`, the first thing a new user runs: a desktop named `demo` comes up, a real
/// app is shown (screenshot, tree) and the bench table printed; the desktop is gone after,
/// unless `--keep`, and a kept one is replaced by the next demo.
#[test]
fn pincer_demo_shows_a_desktop_and_leaves_it_only_when_asked() {
    let sb = Sandbox::new();
    let out = sb.path().join("look");
    let said = sb.pincer_ok(&["demo", "--out", out.to_str().unwrap(), "-n", "5"]);
    for part in [
        "1. local desktop 'demo' up",
        "2. screen: 1920x1080 PNG",
        "3. UI tree of gtk3-widget-factory",
        "4. pincer bench",
        "desktop 'demo' stopped",
    ] {
        assert!(said.contains(part), "no {part:?} in:\n{said}");
    }
    assert!(out.join("screen.png").is_file() && out.join("tree.json").is_file());
    let listed = sb.pincer_ok(&["desktop", "list"]);
    assert!(listed.contains("no local desktops are up"), "{listed}");

    for round in 0..2 {
        let said = sb.pincer_ok(&["demo", "--bench-only", "--keep", "-n", "3"]);
        assert!(said.contains("still running"), "{said}");
        if round == 1 {
            assert!(said.contains("left from an earlier run"), "{said}");
        }
        let listed = sb.pincer_ok(&["desktop", "list"]);
        assert!(
            listed.contains("demo ") && listed.contains("display :"),
            "{listed}"
        );
    }
    sb.pincer_ok(&["desktop", "down", "demo"]);
}
