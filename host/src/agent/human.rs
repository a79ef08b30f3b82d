//! The human agent: a person works on the environments (on the local display, or through
//! VNC) while the evaluator checks after every second and prints which checkpoints have
//! passed, as in CRAB's and AgentStudio's human validation. On the terminal, `answer TEXT`
//! submits an answer (for tasks that ask a question), `done` ends the task, `infeasible
//! [REASON]` gives up, each followed by Enter.

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

/// What a person can type, shown at the start of each task and after a mistyped line.
const COMMANDS: &str = "Type `answer TEXT` + Enter to submit an answer, `done` + Enter when finished, \
                        `infeasible [REASON]` + Enter to give up.";

/// The action a typed line asks for (a blank line: keep waiting).
fn command(line: &str) -> Result<AgentAction, String> {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    match word {
        "" => Ok(AgentAction::Wait { seconds: 1.0 }),
        "done" if rest.is_empty() => Ok(AgentAction::Complete),
        "answer" | "submit" if !rest.is_empty() => Ok(AgentAction::Submit {
            answer: rest.to_owned(),
        }),
        "answer" | "submit" => Err("`answer` needs the answer after it".to_owned()),
        "infeasible" => Ok(AgentAction::Infeasible {
            reason: if rest.is_empty() {
                "the person gave up".to_owned()
            } else {
                rest.to_owned()
            },
        }),
        _ => Err(format!("not a command: {line:?}")),
    }
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
        eprintln!("{COMMANDS}\n");
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
            let action = match line.as_deref().map(command) {
                Some(Ok(action)) => action,
                Some(Err(why)) => {
                    eprintln!("  {why}\n{COMMANDS}");
                    AgentAction::Wait { seconds: 1.0 }
                }
                None => AgentAction::Wait { seconds: 1.0 },
            };
            Ok(Decision {
                actions: vec![action],
                ..Decision::default()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_lines_become_actions() {
        assert_eq!(command("done"), Ok(AgentAction::Complete));
        assert_eq!(
            command("answer  42.5 EUR "),
            Ok(AgentAction::Submit {
                answer: "42.5 EUR".into()
            })
        );
        assert_eq!(
            command("infeasible the app is missing"),
            Ok(AgentAction::Infeasible {
                reason: "the app is missing".into()
            })
        );
        assert!(matches!(
            command("infeasible"),
            Ok(AgentAction::Infeasible { .. })
        ));
        assert_eq!(command(""), Ok(AgentAction::Wait { seconds: 1.0 }));
        assert!(command("answer").unwrap_err().contains("needs the answer"));
        assert!(command("done now").unwrap_err().contains("not a command"));
        assert!(command("helo").unwrap_err().contains("not a command"));
    }
}
