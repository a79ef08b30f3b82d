//! Semantics of the graph evaluator against an in-memory stand-in for environments (a map
//! of files per role answering `Stat` and `ReadFile`); the same functions are tested
//! against real desktops in `tests/tests/checks.rs`.

use super::*;
use crate::eval::functions::Library;
use pincer_shared::WireError;
use pincer_shared::probe::{FileContent, FileKind, FileStat, ProbeReply};
use pincer_shared::setup::{ExecOutput, ExitStatus};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// Files per role; counts batches and records every probe sent. Commands print nothing,
/// GSettings keys are unset and the UI tree is empty.
#[derive(Default)]
struct Fake {
    files: Mutex<BTreeMap<(String, String), String>>,
    batches: AtomicU32,
    broken: Mutex<Option<String>>,
    sent: Mutex<Vec<Probe>>,
}

impl Fake {
    fn put(&self, role: &str, path: &str, text: &str) {
        self.files
            .lock()
            .unwrap()
            .insert((role.into(), path.into()), text.into());
    }

    fn rm(&self, role: &str, path: &str) {
        self.files
            .lock()
            .unwrap()
            .remove(&(role.to_owned(), path.to_owned()));
    }
}

impl ProbeSource for Fake {
    async fn batch(
        &self,
        role: &str,
        probes: Arc<[Probe]>,
    ) -> Result<Vec<ProbeResult>, ClientError> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        // As a guest does.
        if probes.len() > MAX_BATCH {
            return Err(ClientError::Local {
                env: role.into(),
                message: format!("a batch of {} probes is too large", probes.len()),
            });
        }
        self.sent.lock().unwrap().extend(probes.iter().cloned());
        let files = self.files.lock().unwrap();
        let broken = self.broken.lock().unwrap().clone();
        Ok(probes
            .iter()
            .cloned()
            .map(|p| match p {
                Probe::Stat { path } if broken.as_deref() == Some(path.as_str()) => {
                    Err(WireError::PermissionDenied { path })
                }
                Probe::Stat { path } => {
                    let f = files.get(&(role.to_owned(), path.clone()));
                    Ok(ProbeReply::Stat(FileStat {
                        exists: f.is_some(),
                        kind: f.map(|_| FileKind::File),
                        target: None,
                        size: f.map_or(0, |t| t.len() as u64),
                        mode: 0o644,
                        modified_ms: 0,
                        path,
                    }))
                }
                Probe::ReadFile { path, .. } => Ok(ProbeReply::File(
                    files
                        .get(&(role.to_owned(), path.clone()))
                        .map(|t| FileContent {
                            bytes: t.as_bytes().to_vec(),
                            total_size: t.len() as u64,
                            path,
                        }),
                )),
                Probe::Command { .. } => Ok(ProbeReply::Command(ExecOutput {
                    status: ExitStatus::Exited(0),
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    truncated: false,
                    elapsed_ms: 0,
                })),
                Probe::Setting { .. } => Ok(ProbeReply::Setting(None)),
                Probe::UiTree(_) => Ok(ProbeReply::UiTree(Box::default())),
                other => Err(WireError::Unsupported {
                    what: format!("{other:?}"),
                }),
            })
            .collect())
    }
}

fn task(nodes: serde_json::Value) -> Task {
    serde_json::from_value(serde_json::json!({
        "id": "t",
        "instruction": "x",
        "envs": {"desktop": {"platform": "linux"}, "desktop2": {"platform": "linux"}},
        "checkpoints": nodes
    }))
    .unwrap()
}

fn exists(id: &str, env: &str, path: &str, after: &[&str]) -> serde_json::Value {
    serde_json::json!({"id": id, "env": env, "check": "file_exists", "args": {"path": path}, "after": after})
}

fn evaluator(t: &Task) -> Evaluator {
    Evaluator::new(Arc::new(Graph::build(t, &Library::standard()).unwrap()))
}

fn log() -> AgentLog {
    AgentLog::default()
}

#[tokio::test]
async fn passes_cascade_within_a_step_and_latch() {
    let t = task(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        exists("b", "desktop", "/b", &["a"]),
        exists("c", "desktop", "/c", &["b"])
    ]));
    let fake = Fake::default();
    let mut ev = evaluator(&t);
    let r = ev.step(1, &fake, &log()).await.unwrap();
    assert!(r.passed.is_empty());
    assert_eq!(r.checked, 1, "only the source is ready");
    for p in ["/a", "/b", "/c"] {
        fake.put("desktop", p, "x");
    }
    let r = ev.step(2, &fake, &log()).await.unwrap();
    assert_eq!(
        r.passed,
        vec!["a", "b", "c"],
        "a unlocks b unlocks c in the same step"
    );
    assert!(ev.is_success());
    // b was read speculatively with a; c needed one more round trip.
    assert_eq!(r.round_trips, 2);
    // Latched: removing the files does not un-pass anything.
    for p in ["/a", "/b", "/c"] {
        fake.rm("desktop", p);
    }
    let r = ev.step(3, &fake, &log()).await.unwrap();
    assert_eq!(r.checked, 0);
    assert!(ev.is_success());
    let progress = ev.progress();
    assert!(
        progress.iter().all(|p| p.passed_at == Some(2)),
        "{progress:?}"
    );
}

#[tokio::test]
async fn failing_ready_nodes_are_checked_again_next_step() {
    let t = task(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        exists("b", "desktop", "/b", &["a"])
    ]));
    let fake = Fake::default();
    fake.put("desktop", "/a", "x");
    let mut ev = evaluator(&t);
    let r = ev.step(1, &fake, &log()).await.unwrap();
    assert_eq!(r.passed, vec!["a"]);
    assert_eq!(ev.ready_ids(), vec!["b"]);
    let r = ev.step(2, &fake, &log()).await.unwrap();
    assert_eq!(
        (r.checked, r.passed.len()),
        (1, 0),
        "b re-checked and still failing"
    );
    fake.put("desktop", "/b", "x");
    let r = ev.step(3, &fake, &log()).await.unwrap();
    assert_eq!(r.passed, vec!["b"]);
    let p = ev.progress();
    assert_eq!((p[0].passed_at, p[1].passed_at), (Some(1), Some(3)));
    assert_eq!(
        p[1].checks, 3,
        "b was checked in step 1 (as soon as a passed), 2 and 3"
    );
}

#[tokio::test]
async fn a_node_waits_for_all_its_predecessors() {
    let t = task(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        exists("b", "desktop2", "/b", &[]),
        exists("both", "desktop", "/c", &["a", "b"])
    ]));
    let fake = Fake::default();
    fake.put("desktop", "/a", "x");
    fake.put("desktop", "/c", "x");
    let mut ev = evaluator(&t);
    let r = ev.step(1, &fake, &log()).await.unwrap();
    assert_eq!(
        r.passed,
        vec!["a"],
        "'both' is not ready while b fails, even though /c exists"
    );
    fake.put("desktop2", "/b", "x");
    let r = ev.step(2, &fake, &log()).await.unwrap();
    assert_eq!(r.passed, vec!["b", "both"]);
    assert!(ev.is_success());
    assert_eq!(ev.completion_ratio(), 1.0);
}

#[tokio::test]
async fn success_needs_every_sink() {
    let t = task(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        exists("b", "desktop", "/b", &[])
    ]));
    let fake = Fake::default();
    fake.put("desktop", "/a", "x");
    let mut ev = evaluator(&t);
    ev.step(1, &fake, &log()).await.unwrap();
    assert!(!ev.is_success());
    assert_eq!(ev.counts(), (1, 2));
    assert_eq!(ev.completion_ratio(), 0.5);
}

#[tokio::test]
async fn the_initial_check_flags_checkpoints_that_already_pass() {
    let t = task(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        exists("b", "desktop", "/b", &["a"])
    ]));
    let fake = Fake::default();
    fake.put("desktop", "/a", "x");
    let ev = evaluator(&t);
    let already = ev.initial_check(&fake, &log()).await.unwrap();
    assert_eq!(already.len(), 1);
    assert_eq!(already[0].0, "a");
    assert_eq!(already[0].1.feedback, "file /a exists (1 byte)");
    assert_eq!(ev.counts().0, 0, "the initial check latches nothing");
    fake.rm("desktop", "/a");
    assert!(ev.initial_check(&fake, &log()).await.unwrap().is_empty());
}

#[tokio::test]
async fn and_combinator_and_negation_evaluate_on_one_environment() {
    let t = task(serde_json::json!([
        {"id": "both", "env": "desktop", "check": "all_of", "args": {"checks": [
            {"check": "file_contains", "args": {"path": "/a", "text": "hello"}},
            {"check": "not", "args": {"check": "file_exists", "args": {"path": "/lock"}}}
        ]}}
    ]));
    let fake = Fake::default();
    fake.put("desktop", "/a", "hello world");
    fake.put("desktop", "/lock", "");
    let mut ev = evaluator(&t);
    let r = ev.step(1, &fake, &log()).await.unwrap();
    assert!(r.passed.is_empty());
    // A step decides; the feedback of what still fails is written when it is shown.
    assert_eq!(ev.progress()[0].feedback, None);
    ev.finish(&fake, &log()).await.unwrap();
    assert!(
        ev.progress()[0]
            .feedback
            .as_deref()
            .unwrap()
            .contains("1 of 2 checks fails: file_exists holds but must not: file /lock exists"),
        "{:?}",
        ev.progress()
    );
    fake.rm("desktop", "/lock");
    let r = ev.step(2, &fake, &log()).await.unwrap();
    assert_eq!(r.passed, vec!["both"]);
    // A pass is a change: its feedback is written at once.
    assert!(
        ev.progress()[0]
            .feedback
            .as_deref()
            .unwrap()
            .ends_with("; file_exists does not hold, as required: file /lock does not exist"),
        "{:?}",
        ev.progress()
    );
}

#[tokio::test]
async fn an_eleven_node_graph_over_two_environments_is_one_round_trip_each() {
    let mut nodes = Vec::new();
    for i in 0..6 {
        nodes.push(exists(&format!("d{i}"), "desktop", &format!("/d{i}"), &[]));
    }
    for i in 0..5 {
        nodes.push(exists(&format!("e{i}"), "desktop2", &format!("/e{i}"), &[]));
    }
    let t = task(serde_json::Value::Array(nodes));
    let fake = Fake::default();
    let mut ev = evaluator(&t);
    let r = ev.step(1, &fake, &log()).await.unwrap();
    assert_eq!(r.checked, 11);
    assert_eq!(r.round_trips, 2);
    assert_eq!(fake.batches.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn commands_gsettings_and_ui_trees_are_never_read_before_their_node_is_ready() {
    let after_a = |id: &str, check: &str, args: serde_json::Value| serde_json::json!({"id": id, "env": "desktop", "check": check, "args": args, "after": ["a"]});
    let t = task(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        after_a(
            "cmd",
            "command_output_matches",
            serde_json::json!({"argv": ["touch", "/side-effect"], "regex": "^$"})
        ),
        after_a(
            "tree",
            "ui_node_exists",
            serde_json::json!({"selector": {"role": "push button"}})
        ),
        after_a(
            "scheme",
            "gsettings_equals",
            serde_json::json!({"schema": "org.gnome.desktop.interface", "key": "color-scheme", "value": "x"})
        ),
        after_a(
            "wrapped",
            "not",
            serde_json::json!({"check": "command_output_matches", "args": {"argv": ["true"], "regex": "x"}})
        ),
        exists("cheap", "desktop", "/c", &["a"])
    ]));
    let fake = Fake::default();
    let mut ev = evaluator(&t);
    let expensive = |p: &Probe| {
        matches!(
            p,
            Probe::Command { .. } | Probe::UiTree(_) | Probe::Setting { .. }
        )
    };
    // While "a" fails, every step reads it and, ahead, only the cheap successor.
    for step in 1..=3 {
        let r = ev.step(step, &fake, &log()).await.unwrap();
        assert_eq!((r.checked, r.round_trips), (1, 1));
    }
    let sent = std::mem::take(&mut *fake.sent.lock().unwrap());
    assert!(!sent.iter().any(expensive), "{sent:?}");
    assert!(
        sent.contains(&Probe::Stat { path: "/c".into() }),
        "{sent:?}"
    );
    // Once "a" passes, its successors are ready: the cheap one is judged from the read
    // ahead, the others take one more round trip.
    fake.put("desktop", "/a", "x");
    fake.put("desktop", "/c", "x");
    let r = ev.step(4, &fake, &log()).await.unwrap();
    assert_eq!(r.round_trips, 2);
    assert_eq!(r.checked, 6);
    assert_eq!(r.passed, vec!["a", "cmd", "wrapped", "cheap"]);
    let sent = fake.sent.lock().unwrap();
    assert_eq!(sent.iter().filter(|p| expensive(p)).count(), 4, "{sent:?}");
}

#[tokio::test]
async fn plans_larger_than_a_batch_go_out_in_several() {
    let nodes: Vec<serde_json::Value> = (0..1500)
        .map(|i| exists(&format!("n{i}"), "desktop", &format!("/n{i}"), &[]))
        .collect();
    let t = task(serde_json::Value::Array(nodes));
    let fake = Fake::default();
    fake.put("desktop", "/n1499", "x");
    let mut ev = evaluator(&t);
    // One probe per file_exists: 1,500 probes, two batches of at most 1,024.
    let r = ev.step(1, &fake, &log()).await.unwrap();
    assert_eq!((r.checked, r.round_trips), (1500, 2));
    assert_eq!(fake.batches.load(Ordering::SeqCst), 2);
    assert_eq!(r.passed, vec!["n1499"], "replies line up with their nodes");
}

/// A source that loses the last reply of every batch.
struct Short;

impl ProbeSource for Short {
    async fn batch(&self, _: &str, probes: Arc<[Probe]>) -> Result<Vec<ProbeResult>, ClientError> {
        Ok(probes
            .iter()
            .skip(1)
            .map(|_| Ok(ProbeReply::Clipboard(None)))
            .collect())
    }
}

#[tokio::test]
async fn a_batch_answered_short_is_an_environment_error() {
    let t = task(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        exists("b", "desktop", "/b", &[])
    ]));
    let mut ev = evaluator(&t);
    match ev.step(1, &Short, &log()).await {
        Err(StepError::Environment { role, error }) => {
            assert_eq!(role, "desktop");
            assert!(
                error.to_string().contains("2 probes got 1 replies"),
                "{error}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn probe_failures_are_evaluator_errors_not_verdicts() {
    let t = task(serde_json::json!([exists("a", "desktop", "/a", &[])]));
    let fake = Fake::default();
    *fake.broken.lock().unwrap() = Some("/a".into());
    let mut ev = evaluator(&t);
    match ev.step(1, &fake, &log()).await {
        Err(StepError::Evaluator { node, error }) => {
            assert_eq!(node, "a");
            assert!(error.to_string().contains("permission denied"), "{error}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn agent_checks_read_the_log_without_round_trips() {
    let t = task(serde_json::json!([
        {"id": "typed", "check": "typed_contains", "args": {"text": "Hello"}},
        {"id": "answered", "check": "answer_equals", "args": {"text": "42"}, "after": ["typed"]}
    ]));
    let fake = Fake::default();
    let mut ev = evaluator(&t);
    let mut log = AgentLog::default();
    log.events.push(crate::eval::AgentEvent::Action {
        env: "desktop".into(),
        action: pincer_shared::Action::TypeText {
            text: "well Hello there".into(),
        },
    });
    let r = ev.step(1, &fake, &log).await.unwrap();
    assert_eq!(r.passed, vec!["typed"]);
    log.events.push(crate::eval::AgentEvent::Answer {
        text: " 42 ".into(),
    });
    let r = ev.step(2, &fake, &log).await.unwrap();
    assert_eq!(r.passed, vec!["answered"]);
    assert_eq!(fake.batches.load(Ordering::SeqCst), 0);
}

#[test]
fn cycles_are_listed_with_the_other_errors() {
    let e = errors_of(serde_json::json!([
        // A cycle through a checkpoint whose function is unknown...
        {"id": "x", "env": "desktop", "check": "file_exist", "args": {"path": "/x"}, "after": ["y"]},
        exists("y", "desktop", "/y", &["x"]),
        // ...a second one through a bad role, and a node waiting for itself.
        exists("p", "nowhere", "/p", &["q"]),
        exists("q", "desktop", "/q", &["r"]),
        exists("r", "desktop", "/r", &["p"]),
        exists("self", "desktop", "/s", &["self"]),
        exists("fine", "desktop", "/f", &["y"])
    ]));
    let text: Vec<String> = e.iter().map(ToString::to_string).collect();
    assert!(
        matches!(&e[0], GraphError::Build { node, .. } if node == "x"),
        "{text:#?}"
    );
    assert!(
        matches!(&e[1], GraphError::UnknownRole { node, .. } if node == "p"),
        "{text:#?}"
    );
    let cycles: Vec<&Vec<String>> = e
        .iter()
        .filter_map(|e| match e {
            GraphError::Cycle { nodes } => Some(nodes),
            _ => None,
        })
        .collect();
    assert_eq!(
        cycles,
        [
            &vec!["p".to_owned(), "r".into(), "q".into(), "p".into()],
            &vec!["self".to_owned(), "self".into()],
            &vec!["x".to_owned(), "y".into(), "x".into()],
        ],
        "{text:#?}"
    );
    assert_eq!(e.len(), 5, "{text:#?}");
}

fn errors_of(nodes: serde_json::Value) -> Vec<GraphError> {
    Graph::build(&task(nodes), &Library::standard())
        .unwrap_err()
        .errors
}

#[test]
fn validation_rejects_bad_graphs_before_anything_runs() {
    let e = errors_of(serde_json::json!([
        exists("a", "desktop", "/a", &["c"]),
        exists("b", "desktop", "/b", &["a"]),
        exists("c", "desktop", "/c", &["b"])
    ]));
    assert_eq!(
        e,
        vec![GraphError::Cycle {
            nodes: vec!["a".into(), "b".into(), "c".into(), "a".into()]
        }]
    );

    // In edge order (a before c before b), not sorted.
    let e = errors_of(serde_json::json!([
        exists("a", "desktop", "/a", &["b"]),
        exists("b", "desktop", "/b", &["c"]),
        exists("c", "desktop", "/c", &["a"])
    ]));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        e[0].to_string(),
        "the checkpoints a -> c -> b -> a form a cycle"
    );

    let e = errors_of(
        serde_json::json!([{"id": "a", "env": "desktop", "check": "file_exist", "args": {"path": "/a"}}]),
    );
    let msg = e[0].to_string();
    assert!(
        msg.contains("unknown checkpoint function 'file_exist'")
            && msg.contains("did you mean file_exists"),
        "{msg}"
    );

    let e = errors_of(serde_json::json!([exists("a", "phone", "/a", &[])]));
    assert!(
        matches!(&e[0], GraphError::UnknownRole { role, .. } if role == "phone"),
        "{e:?}"
    );

    let e = errors_of(serde_json::json!([
        exists("alpha", "desktop", "/a", &[]),
        exists("beta", "desktop", "/b", &["alpah"])
    ]));
    assert!(
        e[0].to_string().contains("did you mean 'alpha'"),
        "{}",
        e[0]
    );

    let e = errors_of(
        serde_json::json!([{"id": "a", "env": "desktop", "check": "file_contains", "args": {"path": "/a"}}]),
    );
    assert!(
        e[0].to_string().contains("missing field `text`"),
        "{}",
        e[0]
    );

    let e =
        errors_of(serde_json::json!([{"id": "a", "check": "file_exists", "args": {"path": "/a"}}]));
    assert!(matches!(e[0], GraphError::MissingEnv { .. }), "{e:?}");

    // The role typed_contains counts typing on must be one of the task's, even in `not`.
    let e = errors_of(serde_json::json!([
        {"id": "t", "check": "typed_contains", "args": {"text": "x", "env": "phone"}},
        {"id": "n", "check": "not", "args": {"check": "typed_contains", "args": {"text": "x", "env": "desktop2"}}},
        {"id": "ok", "check": "typed_contains", "args": {"text": "x", "env": "desktop"}}
    ]));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        e[0].to_string(),
        "checkpoint 't': typed_contains names environment 'phone' in its `env` argument, but the task declares only desktop, desktop2"
    );

    let e = errors_of(serde_json::json!([
        exists("a", "desktop", "/a", &[]),
        exists("a", "desktop", "/b", &[])
    ]));
    assert!(e.contains(&GraphError::DuplicateId("a".into())));

    let mut t = task(
        serde_json::json!([{"id": "w", "env": "phone", "check": "window_title_contains", "args": {"text": "x"}}]),
    );
    t.envs.insert(
        "phone".into(),
        crate::task::EnvNeed {
            platform: Platform::Android,
        },
    );
    let e = Graph::build(&t, &Library::standard()).unwrap_err();
    assert!(
        matches!(e.errors[0], GraphError::WrongPlatform { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("works on linux"), "{e}");

    let mut t = task(serde_json::json!([exists("a", "desktop", "/a", &[])]));
    t.setup.insert(
        "nowhere".into(),
        vec![crate::task::steps::Step::Sleep { ms: 1 }],
    );
    let e = Graph::build(&t, &Library::standard()).unwrap_err();
    assert!(e.to_string().contains("setup step 0 on 'nowhere'"), "{e}");
}

/// A task done and then undone: latched, both sinks passed; on the final state one no
/// longer holds, so it is no success, and the final counts leave it out.
#[tokio::test]
async fn the_end_is_checked_again_and_undone_sinks_are_named() {
    let t = task(serde_json::json!([
        exists("first", "desktop", "/first", &[]),
        exists("a", "desktop", "/a", &["first"]),
        exists("b", "desktop", "/b", &[])
    ]));
    let fake = Fake::default();
    let mut ev = evaluator(&t);
    fake.put("desktop", "/first", "x");
    fake.put("desktop", "/a", "x");
    ev.step(1, &fake, &log()).await.unwrap();
    fake.rm("desktop", "/a");
    fake.rm("desktop", "/first");
    fake.put("desktop", "/b", "x");
    ev.step(2, &fake, &log()).await.unwrap();
    assert!(ev.is_success(), "latched, every sink passed once");
    assert_eq!(ev.final_counts(), None, "not checked at the end yet");
    ev.finish(&fake, &log()).await.unwrap();
    assert_eq!(ev.undone_sinks(), ["a"]);
    assert_eq!(
        ev.counts(),
        (3, 3),
        "the latched count stays, as CRAB counts it"
    );
    assert_eq!(ev.final_counts(), Some((1, 3)));
    let a = ev.progress().into_iter().find(|p| p.id == "a").unwrap();
    assert_eq!((a.passed_at, a.held_at_end), (Some(1), Some(false)));
    assert!(
        a.feedback
            .as_deref()
            .unwrap()
            .starts_with("passed at step 1 but no longer holds"),
        "{a:?}"
    );

    // Put back, the sink holds again; an inner checkpoint that no longer holds costs final
    // completion, not success.
    fake.put("desktop", "/a", "x");
    ev.finish(&fake, &log()).await.unwrap();
    assert!(ev.undone_sinks().is_empty());
    assert_eq!(ev.final_counts(), Some((2, 3)));
}

/// `pincer task check` and every run judge a task by one function, which names every
/// problem at once: the graph's and the oracle's.
#[test]
fn a_task_is_judged_whole_graph_and_oracle_together() {
    let lib = Library::standard();
    let mut t = task(serde_json::json!([exists("a", "desktop", "/tmp/a", &[])]));
    assert!(Graph::check_task(&t, &lib).is_ok());
    t.oracle = Some(
        serde_json::from_value(serde_json::json!([
            {"do": "submit", "answer": "{{total}}"}
        ]))
        .unwrap(),
    );
    let e = Graph::check_task(&t, &lib).unwrap_err().to_string();
    assert_eq!(
        e,
        "task 't': oracle step 1 uses {{total}} before a `read` step sets it"
    );
    t.checkpoints.clear();
    let e = Graph::check_task(&t, &lib).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "task 't' is invalid:\n  - the task has no checkpoints\ntask 't': oracle step 1"
        ),
        "{e}"
    );
}

/// A final checkpoint is never judged after a step, only once by `finish`, on the state
/// the run ended in; when it passes, it passes at the last step, and it gives the score.
#[tokio::test]
async fn final_checkpoints_are_judged_once_on_the_final_state() {
    let mut last = exists("end", "desktop", "/end", &["a"]);
    last["final"] = true.into();
    let t = task(serde_json::json!([exists("a", "desktop", "/a", &[]), last]));
    let fake = Fake::default();
    let mut ev = evaluator(&t);
    fake.put("desktop", "/a", "x");
    fake.put("desktop", "/end", "x");
    let r = ev.step(1, &fake, &log()).await.unwrap();
    assert_eq!(r.passed, vec!["a"], "the final one waits for the end");
    assert!(!ev.is_success() && ev.ready_ids().is_empty());
    ev.step(2, &fake, &log()).await.unwrap();
    assert_eq!(ev.score(), Some(0.0), "not judged yet");
    ev.finish(&fake, &log()).await.unwrap();
    assert!(ev.is_success() && ev.undone_sinks().is_empty());
    assert_eq!(ev.score(), Some(1.0));
    let end = ev.progress().into_iter().find(|p| p.id == "end").unwrap();
    assert_eq!(
        (end.passed_at, end.checks, end.final_only),
        (Some(2), 1, true)
    );

    // Its file gone by the end: it fails, with what it saw, and the score is 0.
    let mut ev = evaluator(&t);
    ev.step(1, &fake, &log()).await.unwrap();
    fake.rm("desktop", "/end");
    ev.finish(&fake, &log()).await.unwrap();
    assert!(!ev.is_success());
    assert_eq!(ev.score(), Some(0.0));
    let end = ev.progress().into_iter().find(|p| p.id == "end").unwrap();
    assert_eq!(end.passed_at, None);
    assert!(end.feedback.unwrap().contains("/end"));

    // Its predecessor never passed: it is not judged at all.
    let mut ev = evaluator(&t);
    fake.rm("desktop", "/a");
    fake.put("desktop", "/end", "x");
    ev.finish(&fake, &log()).await.unwrap();
    assert_eq!(ev.score(), Some(0.0));
    assert!(!ev.is_success());

    // Tasks without final checkpoints have no score.
    let plain = task(serde_json::json!([exists("a", "desktop", "/a", &[])]));
    assert_eq!(evaluator(&plain).score(), None);
}

/// A final checkpoint is judged only when the run is over, so nothing may come after it.
#[test]
fn a_final_checkpoint_with_successors_is_refused() {
    let mut first = exists("a", "desktop", "/a", &[]);
    first["final"] = true.into();
    let t = task(serde_json::json!([
        first,
        exists("b", "desktop", "/b", &["a"])
    ]));
    let e = Graph::build(&t, &Library::standard())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("checkpoint 'a' is final") && e.contains("yet b come after it"),
        "{e}"
    );
}
