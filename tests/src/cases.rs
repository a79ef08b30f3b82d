//! Checkpoint cases judged against live environments the way the runner judges them: a
//! task whose checkpoints are the cases, one evaluator step over the environments, and the
//! verdicts and feedback compared with what each case expects. Shared by the tests of the
//! checkpoint library (`checks.rs`, `checks_crab.rs`).

use pincer::env::{ClientError, Environment};
use pincer::eval::functions::Library;
use pincer::eval::graph::{Envs, Evaluator, Graph, ProbeSource};
use pincer::eval::{AgentLog, ProbeResult};
use pincer::task::Task;
use pincer_shared::probe::Probe;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One checkpoint and what the live state must make of it.
#[derive(Debug, Clone)]
pub struct Case {
    /// The checkpoint function.
    pub check: &'static str,
    /// Its arguments.
    pub args: Value,
    /// Whether the state must make it pass.
    pub passes: bool,
    /// Parts of the observed state the feedback line must name.
    pub says: Vec<String>,
}

/// A case the state must make pass, with feedback naming each of `says`.
pub fn pass(check: &'static str, args: Value, says: &[&str]) -> Case {
    Case {
        check,
        args,
        passes: true,
        says: says.iter().map(|s| (*s).to_owned()).collect(),
    }
}

/// A case the state must make fail, with feedback naming each of `says`.
pub fn fail(check: &'static str, args: Value, says: &[&str]) -> Case {
    Case {
        passes: false,
        ..pass(check, args, says)
    }
}

impl Case {
    /// Also requires `text` in the feedback.
    pub fn saying(mut self, text: impl Into<String>) -> Self {
        self.says.push(text.into());
        self
    }
}

/// "pass" or "fail", for messages.
fn verdict(passed: bool) -> &'static str {
    if passed { "pass" } else { "fail" }
}

/// A task over Linux environments with these roles and checkpoints.
pub fn task(roles: &[&str], checkpoints: Vec<Value>) -> Task {
    let envs: serde_json::Map<String, Value> = roles
        .iter()
        .map(|r| ((*r).to_owned(), json!({"platform": "linux"})))
        .collect();
    serde_json::from_value(json!({
        "id": "checks",
        "instruction": "make the state true",
        "envs": envs,
        "checkpoints": checkpoints,
    }))
    .expect("a valid task")
}

/// The task's checkpoint graph over the standard library; panics if it does not build.
pub fn graph(t: &Task) -> Arc<Graph> {
    Arc::new(Graph::build(t, &Library::standard()).unwrap_or_else(|e| panic!("{e}")))
}

/// Live environments by role.
pub fn envs(roles: Vec<(&str, Environment)>) -> Envs {
    Envs(
        roles
            .into_iter()
            .map(|(r, e)| (r.to_owned(), Arc::new(e)))
            .collect(),
    )
}

/// The live environments, counting the batches each role is sent: the evaluator's
/// `round_trips` is its own claim, this is what actually went over the wire.
#[derive(Debug)]
pub struct Counted<'a> {
    envs: &'a Envs,
    batches: Mutex<BTreeMap<String, u32>>,
}

impl<'a> Counted<'a> {
    /// Counts the batches sent to `envs`, none so far.
    pub fn new(envs: &'a Envs) -> Self {
        Self {
            envs,
            batches: Mutex::default(),
        }
    }

    /// The batches sent so far, by role.
    pub fn batches(&self) -> BTreeMap<String, u32> {
        self.batches.lock().unwrap().clone()
    }
}

impl ProbeSource for Counted<'_> {
    async fn batch(
        &self,
        role: &str,
        probes: Arc<[Probe]>,
    ) -> Result<Vec<ProbeResult>, ClientError> {
        *self
            .batches
            .lock()
            .unwrap()
            .entry(role.to_owned())
            .or_default() += 1;
        self.envs.batch(role, probes).await
    }
}

/// Judges `cases` as the runner does: one task whose checkpoints are the cases (all
/// sources, on `role` when given), one evaluator step over the live environments, which
/// must read each environment in one batch, then the failing ones' feedback read as the
/// runner reads it at the end. `Graph::check_all` (what `pincer task check`
/// uses) must agree on every verdict. Panics listing every case that came out wrong or
/// whose feedback does not name what it should.
pub async fn judge(envs: &Envs, role: Option<&str>, cases: &[Case], log: &AgentLog) {
    let ids: Vec<String> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{i:02}-{}-{}", c.check, verdict(c.passes)))
        .collect();
    let nodes = cases
        .iter()
        .zip(&ids)
        .map(|(c, id)| json!({"id": id, "env": role, "check": c.check, "args": c.args}))
        .collect();
    let roles: Vec<&str> = envs.0.keys().map(String::as_str).collect();
    let g = graph(&task(&roles, nodes));

    let wire = Counted::new(envs);
    let mut ev = Evaluator::new(g.clone());
    let report = ev.step(1, &wire, log).await.expect("the step is evaluated");
    let reads_env = cases
        .iter()
        .any(|c| Library::standard().reads_env(c.check, &c.args));
    let want_trips = u32::from(role.is_some() && reads_env);
    assert_eq!(report.checked, cases.len(), "every case is a ready source");
    assert_eq!(
        report.round_trips, want_trips,
        "one batch for the environment"
    );
    assert_eq!(
        wire.batches().values().sum::<u32>(),
        want_trips,
        "batches sent: {:?}",
        wire.batches()
    );

    // As the runner does at the end: the failing ones' feedback, read once more.
    ev.finish(envs, log).await.expect("the feedback is read");

    let all: BTreeMap<String, bool> = g
        .check_all(envs, log)
        .await
        .expect("check_all is evaluated")
        .into_iter()
        .map(|(id, v)| {
            let v = v.unwrap_or_else(|e| panic!("{id}: the check could not judge: {e}"));
            (id, v.passed)
        })
        .collect();

    let mut wrong = Vec::new();
    for ((case, id), p) in cases.iter().zip(&ids).zip(ev.progress()) {
        assert_eq!(&p.id, id);
        let passed = p.passed_at.is_some();
        let feedback = p.feedback.unwrap_or_default();
        if passed != case.passes {
            wrong.push(format!(
                "{id} {}: expected {}, got {}: {feedback}",
                case.args,
                verdict(case.passes),
                verdict(passed),
            ));
        }
        if all[id] != passed {
            wrong.push(format!(
                "{id}: check_all says {}, step says {passed}",
                all[id]
            ));
        }
        let missing: Vec<&String> = case
            .says
            .iter()
            .filter(|s| !feedback.contains(s.as_str()))
            .collect();
        if !missing.is_empty() {
            wrong.push(format!(
                "{id} {}: feedback \"{feedback}\" does not name {missing:?}",
                case.args
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The functions among `names` that `cases` lack a passing or a failing case for, a line
/// each ("NAME has no passing case").
pub fn uncovered<'a>(cases: &[Case], names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut missing = Vec::new();
    for name in names {
        for want in [true, false] {
            if !cases.iter().any(|c| c.check == name && c.passes == want) {
                missing.push(format!(
                    "{name} has no {} case",
                    if want { "passing" } else { "failing" }
                ));
            }
        }
    }
    missing
}

/// Judges agent-log cases the way [`judge`] does, on a task that declares the roles their
/// `env` arguments name (a desktop and a phone), with no environment behind them: these
/// checks read none.
pub async fn judge_log(cases: &[Case], log: &AgentLog) {
    let nodes: Vec<Value> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"id": format!("{i:02}"), "check": c.check, "args": c.args}))
        .collect();
    let mut ev = Evaluator::new(graph(&task(&["desktop", "phone"], nodes)));
    let r = ev.step(1, &Envs::default(), log).await.unwrap();
    assert_eq!((r.checked, r.round_trips), (cases.len(), 0));
    ev.finish(&Envs::default(), log).await.unwrap();
    let wrong: Vec<String> = cases
        .iter()
        .zip(ev.progress())
        .filter_map(|(c, p)| {
            let feedback = p.feedback.unwrap_or_default();
            let named = c.says.iter().all(|s| feedback.contains(s.as_str()));
            (p.passed_at.is_some() != c.passes || !named).then(|| {
                format!(
                    "{} {}: expected {} naming {:?}, got \"{feedback}\"",
                    c.check,
                    c.args,
                    if c.passes { "pass" } else { "fail" },
                    c.says
                )
            })
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
