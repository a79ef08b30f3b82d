//! The human agent: a person works on the environments (on the local display, or through
//! VNC) while the evaluator checks after every second and prints which checkpoints have
//! passed, as in CRAB's and AgentStudio's human validation. Type `done` (or `infeasible`)
//! and Enter on the terminal to end.

use super::actions::AgentAction;
use super::{Agent, AgentError, Decision, Observation, TaskBrief};
use futures::future::BoxFuture;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, TryRecvError};

/// Lines typed on the terminal, read by one background thread for the whole process.
fn stdin_lines() -> &'static Mutex<Receiver<String>> {
    static LINES: std::sync::OnceLock<Mutex<Receiver<String>>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
                if tx.send(line.trim().to_owned()).is_err() {
                    return;
                }
                line.clear();
            }
        });
        Mutex::new(rx)
    })
}

/// Waits for a person.
#[derive(Debug, Default)]
pub struct Human {
    shown: Vec<(String, bool)>,
}

impl Agent for Human {
    fn name(&self) -> String {
        "human".into()
    }

    fn begin(&mut self, brief: &TaskBrief) -> Result<(), AgentError> {
        self.shown.clear();
        eprintln!("\n=== task {} ===\n{}\n", brief.id, brief.instruction);
        eprintln!("Work on:");
        for role in brief.roles.keys() {
            let name = brief
                .env_names
                .get(role)
                .map_or(role.as_str(), String::as_str);
            eprintln!(
                "  {role}: environment '{name}' (a local desktop: `pincer desktop vnc {name}` serves it over VNC)"
            );
        }
        eprintln!("Type `done` + Enter when finished, `infeasible` + Enter to give up.\n");
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            if obs.checkpoints != self.shown {
                for (id, passed) in &obs.checkpoints {
                    let was = self
                        .shown
                        .iter()
                        .find(|(i, _)| i == id)
                        .is_some_and(|(_, p)| *p);
                    if *passed && !was {
                        eprintln!("  checkpoint passed: {id}");
                    }
                }
                let done = obs.checkpoints.iter().filter(|(_, p)| *p).count();
                eprintln!("  progress: {done}/{} checkpoints", obs.checkpoints.len());
                self.shown = obs.checkpoints.clone();
            }
            let line = match stdin_lines()
                .lock()
                .map_err(|e| AgentError::Input(e.to_string()))?
                .try_recv()
            {
                Ok(l) => Some(l),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => Some("done".into()),
            };
            let action = match line.as_deref() {
                Some("done") => AgentAction::Complete,
                Some("infeasible") => AgentAction::Infeasible {
                    reason: "the person gave up".into(),
                },
                _ => AgentAction::Wait { seconds: 1.0 },
            };
            Ok(Decision {
                actions: vec![action],
                ..Decision::default()
            })
        })
    }
}
