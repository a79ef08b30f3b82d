//! Every bundled `demo` task's setup, repeated: `pincer task check --repeat 20` sets each
//! task up twenty times in a row on real desktops and fails if any setup step fails (a
//! window that a step races) or leaves a starting checkpoint already passing. Two pairs of
//! desktops share the suite, so the two halves run side by side.

use pincer_tests::Sandbox;

/// How often each setup runs.
const ROUNDS: &str = "20";

/// Sets up every demo task whose position in id order has parity `half`, `ROUNDS` times.
fn repeat_half(half: usize) {
    let sb = Sandbox::new();
    let (one, two) = (format!("set{half}a"), format!("set{half}b"));
    let _d1 = sb.desktop(&one, "1024x768", &[]);
    let _d2 = sb.desktop(&two, "1024x768", &[]);
    let mut ids: Vec<String> = pincer::task::load_path("demo")
        .unwrap()
        .tasks
        .into_iter()
        .map(|(t, _)| t.id)
        .collect();
    ids.sort();
    let mut report = String::new();
    let mut failed = Vec::new();
    for id in ids.iter().skip(half).step_by(2) {
        let (b1, b2) = (format!("desktop={one}"), format!("desktop2={two}"));
        let mut args = vec!["task", "check", id, "--tasks", "demo", "--repeat", ROUNDS];
        args.extend(["--bind", &b1]);
        if id.starts_with("cross-") {
            args.extend(["--bind", &b2]);
        }
        let out = sb.pincer(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        report.push_str(&format!(
            "== {id}\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
        // One line per round and a summary, whatever the outcome.
        let rounds = stdout
            .lines()
            .filter(|l| l.contains(&format!("/{ROUNDS} ")))
            .count();
        assert_eq!(rounds.to_string(), ROUNDS, "{id}:\n{stdout}");
        if !out.status.success() {
            failed.push(id.clone());
        }
    }
    assert!(failed.is_empty(), "setups failed: {failed:?}\n{report}");
}

#[test]
fn every_demo_setup_succeeds_twenty_times_first_half() {
    repeat_half(0);
}

#[test]
fn every_demo_setup_succeeds_twenty_times_second_half() {
    repeat_half(1);
}
