//! The LLM agent: per task, one conversation per model role, arranged as one of CRAB's
//! structures. Each decision makes one model call (`single`), a planner call then a tool
//! agent call (`planner`), or a main agent call then the chosen environment's sub-agent
//! call (`per-env`). Replies become actions through `actions::parse`/`parse_text`; an
//! unusable reply becomes an invalid decision with the reason, told back to the model. So
//! does a refusal ("the model refused: ..."), whose turn also leaves the conversation.

use super::conversation::{Conversation, ToolCall, ToolResult};
use super::http::{Backend, Call};
use super::prompt::{self, META_TOOLS};
use super::wire::Reply;
use super::{Mode, Settings, Structure};
use crate::agent::actions::{self, AgentAction};
use crate::agent::{
    Agent, AgentError, Decision, Exchange, Observation, TaskBrief, ToolSpec, Usage,
};
use futures::future::BoxFuture;
use pincer_shared::Platform;
use std::collections::BTreeMap;

/// The tool the per-env main agent hands sub-goals out with.
const DELEGATE: &str = "delegate";

/// An LLM agent.
#[derive(Debug)]
pub(crate) struct LlmAgent {
    name: String,
    backend: Backend,
    structure: Structure,
    mode: Mode,
    history: usize,
    task: Option<TaskState>,
}

/// What one task run keeps.
#[derive(Debug)]
struct TaskState {
    brief: TaskBrief,
    /// Decisions so far: the runner numbers its step images the same way.
    decision: u32,
    roles: Roles,
    chats: Chats,
}

/// Environment roles and platforms.
type Roles = BTreeMap<String, Platform>;

/// The conversations of a structure.
#[derive(Debug)]
enum Chats {
    Single {
        agent: Conversation,
    },
    Planner {
        planner: Conversation,
        tools: Conversation,
        /// What the tool agent did with the last sub-goal, for the planner.
        report: Option<String>,
    },
    PerEnv {
        main: Conversation,
        envs: BTreeMap<String, Conversation>,
        /// What came of the last order, for a main agent that answers in text (with tools
        /// it is the delegate call's result).
        report: Option<String>,
    },
}

/// What a reply comes to: the actions, or why there are none; and what to tell the model
/// about each of its calls.
struct Reading {
    actions: Result<Vec<AgentAction>, String>,
    results: Vec<ToolResult>,
}

fn result(c: &ToolCall, content: impl Into<String>) -> ToolResult {
    ToolResult {
        id: c.id.clone(),
        name: c.name.clone(),
        content: content.into(),
    }
}

/// Puts a read reply into its conversation with what became of its calls; a refused one
/// takes its turn back out instead (the runner's feedback tells the model of the refusal).
fn record(conv: &mut Conversation, reply: &Reply, results: Vec<ToolResult>) {
    if reply.refusal.is_some() {
        conv.withdraw();
    } else {
        conv.answer(reply.message.clone());
        conv.settle(results);
    }
}

/// Reads a reply as actions on `roles` with the tools named `allowed`.
fn read(reply: &Reply, mode: Mode, roles: &Roles, allowed: &[ToolSpec]) -> Reading {
    // Whatever came with a refusal (the text before a cut, a call) is not an answer; the
    // turn is withdrawn, so its calls need no results.
    if let Some(refusal) = &reply.refusal {
        return Reading {
            actions: Err(format!("the model refused: {refusal}")),
            results: Vec::new(),
        };
    }
    let offered = |name: &str| allowed.iter().any(|t| t.name == name);
    let names = || {
        allowed
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    // Calls are read whatever the mode: a server that sends them in JSON mode still needs
    // each one answered next turn.
    if !reply.calls.is_empty() {
        let mut actions = Vec::new();
        let mut errors = Vec::new();
        for c in &reply.calls {
            // Names are matched as `actions::parse` matches them (case, aliases such as
            // "done"), then against the tools this model role was offered.
            let parsed = if !c.args.is_object() {
                Err(format!(
                    "the arguments of {} are not a JSON object: {}",
                    c.name, c.args
                ))
            } else {
                match actions::parse(&c.name, &c.args, roles) {
                    Ok(a) if offered(&a.tool_name()) => Ok(a),
                    Err(e) if !e.0.starts_with("unknown action") => Err(e.0),
                    _ => Err(format!(
                        "unknown tool '{}'; the tools are {}",
                        c.name,
                        names()
                    )),
                }
            };
            match parsed {
                Ok(a) => actions.push(a),
                Err(e) => errors.push(e),
            }
        }
        let results = if errors.is_empty() {
            reply
                .calls
                .iter()
                .map(|c| result(c, "executed; the next observation shows the effect"))
                .collect()
        } else {
            let why = errors.join("; ");
            reply
                .calls
                .iter()
                .map(|c| result(c, format!("not executed: {why}")))
                .collect()
        };
        let actions = if errors.is_empty() {
            Ok(actions)
        } else {
            Err(errors.join("; "))
        };
        return Reading { actions, results };
    }
    // JSON in text: the mode's way, and a fallback for tool models that wrote JSON instead.
    let parsed = actions::parse_text(&reply.text, roles)
        .map_err(|e| e.0)
        .and_then(
            |acts| match acts.iter().find(|a| !offered(&a.tool_name())) {
                Some(a) => Err(format!(
                    "'{}' is not an action here; the actions are {}",
                    a.name(),
                    names()
                )),
                None => Ok(acts),
            },
        );
    let actions = match (parsed, mode) {
        (Ok(a), _) => Ok(a),
        (Err(_), Mode::Tools) => Err(match &reply.stop {
            Some(stop) if reply.text.is_empty() => format!("the reply called no tool and said nothing (stop reason: {stop}); call exactly one tool each turn"),
            _ => "the reply called no tool; call exactly one tool each turn (`complete` when the task is done)".to_owned(),
        }),
        (Err(e), Mode::Json) => Err(format!("{e}; reply with a JSON object such as {{\"action\": \"click\", \"target\": {{\"element\": 4}}}}")),
    };
    Reading {
        actions,
        results: Vec::new(),
    }
}

/// The tools of a per-env sub-agent: its platform's input tools and `wait`.
fn env_tools(role: &str, p: Platform) -> Vec<ToolSpec> {
    let one: Roles = [(role.to_owned(), p)].into();
    actions::tools(&one)
        .into_iter()
        .filter(|t| !META_TOOLS.contains(&t.name.as_str()))
        .collect()
}

/// The tools of the per-env main agent: `delegate` and the meta tools.
fn main_tools(brief: &TaskBrief) -> Vec<ToolSpec> {
    let roles: Vec<&String> = brief.roles.keys().collect();
    let mut t = vec![ToolSpec {
        name: DELEGATE.into(),
        description: "Give one environment's agent its next sub-goal; it sees only that environment and acts there.".into(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {
                "env": {"type": "string", "enum": roles, "description": "which environment"},
                "instruction": {"type": "string", "description": "the sub-goal, concretely"}
            },
            "required": ["env", "instruction"]
        }),
    }];
    t.extend(
        brief
            .tools
            .iter()
            .filter(|s| META_TOOLS.contains(&s.name.as_str()))
            .cloned(),
    );
    t
}

/// What the main agent asked for.
enum Order {
    /// Hand a sub-goal to one environment's agent.
    Delegate { env: String, instruction: String },
    /// End or answer the task.
    Meta(AgentAction),
}

/// Reads the main agent's reply.
fn read_main(
    reply: &Reply,
    mode: Mode,
    roles: &Roles,
) -> (Result<Order, String>, Option<ToolCall>) {
    let delegate = |args: &serde_json::Value| -> Result<Order, String> {
        let env = args.get("env").and_then(|v| v.as_str()).unwrap_or_default();
        let instruction = args
            .get("instruction")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .trim();
        if !roles.contains_key(env) {
            return Err(format!(
                "delegate: env '{env}' is not one of {}",
                roles.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        if instruction.is_empty() {
            return Err("delegate needs an `instruction`".into());
        }
        Ok(Order::Delegate {
            env: env.to_owned(),
            instruction: instruction.to_owned(),
        })
    };
    let meta = |name: &str, args: &serde_json::Value| -> Result<Order, String> {
        if !META_TOOLS.contains(&name) {
            return Err(format!(
                "unknown tool '{name}'; the tools are {DELEGATE}, {}",
                META_TOOLS.join(", ")
            ));
        }
        actions::parse(name, args, roles)
            .map(Order::Meta)
            .map_err(|e| e.0)
    };
    if let Some(c) = reply.calls.first() {
        let order = if c.name == DELEGATE {
            delegate(&c.args)
        } else {
            meta(&c.name, &c.args)
        };
        return (order, Some(c.clone()));
    }
    let start = reply.text.find('{');
    let value = start
        .and_then(|s| {
            serde_json::Deserializer::from_str(&reply.text[s..])
                .into_iter::<serde_json::Value>()
                .next()
        })
        .and_then(Result::ok);
    let order = match value {
        Some(v) if v.get("env").is_some() || v.get("action").and_then(|a| a.as_str()) == Some(DELEGATE) => delegate(&v),
        Some(v) => match v.get("action").and_then(|a| a.as_str()) {
            Some(name) => meta(name, &v),
            None => Err(format!("{v} names neither an environment nor an action")),
        },
        None if mode == Mode::Tools => Err(format!("the reply called no tool; call `{DELEGATE}` or one of {}", META_TOOLS.join(", "))),
        None => Err("no JSON object in the reply; reply with {\"env\": ..., \"instruction\": ...} or {\"action\": \"complete\"}".into()),
    };
    (order, None)
}

impl LlmAgent {
    pub(crate) fn new(s: &Settings, backend: Backend) -> Self {
        let mut name = format!("{}:{}", s.provider, s.model);
        match s.structure {
            Structure::Single => {}
            Structure::Planner => name.push_str("/planner"),
            Structure::PerEnv => name.push_str("/per-env"),
        }
        Self {
            name,
            backend,
            structure: s.structure,
            mode: s.mode,
            history: s.history,
            task: None,
        }
    }

    /// Tools to send for a tool list: none in JSON mode (they are in the prompt).
    fn sent(mode: Mode, tools: &[ToolSpec]) -> &[ToolSpec] {
        if mode == Mode::Tools { tools } else { &[] }
    }

    async fn call(
        backend: &Backend,
        who: &str,
        conv: &Conversation,
        mode: Mode,
        used: &mut Usage,
        exchanges: &mut Vec<Exchange>,
    ) -> Result<Reply, AgentError> {
        let Call { reply, exchange } = backend
            .chat(
                who,
                &conv.system,
                &conv.window(),
                Self::sent(mode, &conv.tools),
            )
            .await?;
        used.add(reply.usage);
        exchanges.push(exchange);
        Ok(reply)
    }

    async fn decide(&mut self, obs: &Observation) -> Result<Decision, AgentError> {
        let mode = self.mode;
        let backend = &self.backend;
        let st = self.task.as_mut().ok_or(AgentError::NotStarted)?;
        st.decision += 1;
        let n = st.decision;
        let mut usage = Usage::default();
        let mut exchanges = Vec::new();
        let all: Vec<&crate::agent::View> = obs.views.iter().collect();
        let (actions, thought) = match &mut st.chats {
            Chats::Single { agent } => {
                agent.ask(prompt::observation(obs, &st.brief, &all, n, true, None));
                let reply =
                    Self::call(backend, "agent", agent, mode, &mut usage, &mut exchanges).await?;
                let r = read(&reply, mode, &st.roles, &agent.tools);
                record(agent, &reply, r.results);
                (r.actions, Some(reply.text).filter(|t| !t.is_empty()))
            }
            Chats::Planner {
                planner,
                tools,
                report,
            } => {
                let preface = report
                    .take()
                    .map(|r| format!("What was done for your last step: {r}\n"));
                planner.ask(prompt::observation(obs, &st.brief, &all, n, true, preface));
                let plan = Self::call(
                    backend,
                    "planner",
                    planner,
                    mode,
                    &mut usage,
                    &mut exchanges,
                )
                .await?;
                // The planner has no tools: nothing to settle.
                record(planner, &plan, Vec::new());
                if let Some(refusal) = &plan.refusal {
                    (Err(format!("the planner refused: {refusal}")), None)
                } else if plan.text.is_empty() {
                    let why = format!(
                        "the planner gave no next step (stop reason: {})",
                        plan.stop.as_deref().unwrap_or("none")
                    );
                    *report = Some(format!("nothing: {why}"));
                    (Err(why), None)
                } else {
                    let preface = format!("Next step from the planner: {}\n\n", plan.text);
                    tools.ask(prompt::observation(
                        obs,
                        &st.brief,
                        &all,
                        n,
                        false,
                        Some(preface),
                    ));
                    let reply = Self::call(
                        backend,
                        "tool-agent",
                        tools,
                        mode,
                        &mut usage,
                        &mut exchanges,
                    )
                    .await?;
                    let r = read(&reply, mode, &st.roles, &tools.tools);
                    record(tools, &reply, r.results);
                    *report = Some(match &r.actions {
                        Ok(a) => a
                            .iter()
                            .map(AgentAction::describe)
                            .collect::<Vec<_>>()
                            .join("; "),
                        Err(e) => format!("nothing: the tool agent's reply was unusable: {e}"),
                    });
                    (r.actions, Some(format!("plan: {}", plan.text)))
                }
            }
            Chats::PerEnv { main, envs, report } => {
                let preface = report
                    .take()
                    .map(|r| format!("What came of your last order: {r}\n"));
                main.ask(prompt::observation(obs, &st.brief, &all, n, false, preface));
                let order =
                    Self::call(backend, "main", main, mode, &mut usage, &mut exchanges).await?;
                if let Some(refusal) = &order.refusal {
                    main.withdraw();
                    (Err(format!("the main agent refused: {refusal}")), None)
                } else {
                    main.answer(order.message.clone());
                    let (parsed, call) = read_main(&order, mode, &st.roles);
                    let mut results: Vec<ToolResult> = order
                        .calls
                        .iter()
                        .skip(1)
                        .map(|c| result(c, "ignored: one call per turn"))
                        .collect();
                    let (actions, thought, said) = match parsed {
                        Err(e) => (Err(e.clone()), None, format!("not done: {e}")),
                        Ok(Order::Meta(a)) => (Ok(vec![a]), None, "done".to_owned()),
                        Ok(Order::Delegate { env, instruction }) => {
                            let (Some(sub), Some(view), Some(p)) =
                                (envs.get_mut(&env), obs.view(&env), st.roles.get(&env))
                            else {
                                return Err(AgentError::NoView(env));
                            };
                            let one: Roles = [(env.clone(), *p)].into();
                            let preface =
                                format!("Sub-goal from the main agent: {instruction}\n\n");
                            sub.ask(prompt::observation(
                                obs,
                                &st.brief,
                                &[view],
                                n,
                                true,
                                Some(preface),
                            ));
                            let reply =
                                Self::call(backend, &env, sub, mode, &mut usage, &mut exchanges)
                                    .await?;
                            let r = read(&reply, mode, &one, &sub.tools);
                            record(sub, &reply, r.results);
                            let said = match &r.actions {
                                Ok(a) => format!(
                                    "the {env} agent did: {}",
                                    a.iter()
                                        .map(AgentAction::describe)
                                        .collect::<Vec<_>>()
                                        .join("; ")
                                ),
                                Err(e) => format!("the {env} agent's reply was unusable: {e}"),
                            };
                            (r.actions, Some(format!("{env}: {instruction}")), said)
                        }
                    };
                    match call {
                        Some(c) => results.insert(0, result(&c, said)),
                        None => *report = Some(said),
                    }
                    main.settle(results);
                    (actions, thought)
                }
            }
        };
        Ok(match actions {
            Ok(actions) => Decision {
                actions,
                invalid: None,
                thought,
                usage,
                exchanges,
            },
            Err(why) => Decision {
                actions: Vec::new(),
                invalid: Some(why),
                thought,
                usage,
                exchanges,
            },
        })
    }
}

impl Agent for LlmAgent {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn begin(&mut self, brief: &TaskBrief) -> Result<(), AgentError> {
        let mut brief = brief.clone();
        // The solution is the oracle's, never the model's.
        brief.oracle = None;
        let (mode, history) = (self.mode, self.history);
        let chats = match self.structure {
            Structure::Single => Chats::Single {
                agent: Conversation::new(
                    prompt::single(&brief, mode, &brief.tools),
                    brief.tools.clone(),
                    history,
                ),
            },
            Structure::Planner => Chats::Planner {
                planner: Conversation::new(prompt::planner(&brief), Vec::new(), history),
                tools: Conversation::new(
                    prompt::tool_agent(&brief, mode, &brief.tools),
                    brief.tools.clone(),
                    history,
                ),
                report: None,
            },
            Structure::PerEnv => {
                let tools = main_tools(&brief);
                Chats::PerEnv {
                    main: Conversation::new(
                        prompt::main_agent(&brief, mode, &tools),
                        tools,
                        history,
                    ),
                    envs: brief
                        .roles
                        .iter()
                        .map(|(role, p)| {
                            let tools = env_tools(role, *p);
                            (
                                role.clone(),
                                Conversation::new(
                                    prompt::env_agent(&brief, role, *p, mode, &tools),
                                    tools,
                                    history,
                                ),
                            )
                        })
                        .collect(),
                    report: None,
                }
            }
        };
        self.task = Some(TaskState {
            roles: brief.roles.clone(),
            brief,
            decision: 0,
            chats,
        });
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(self.decide(obs))
    }
}

#[cfg(test)]
mod tests {
    use super::super::conversation::{Message, Role};
    use super::*;
    use serde_json::json;

    fn roles() -> Roles {
        [("desktop".to_owned(), Platform::Linux)].into()
    }

    fn reply(text: &str, calls: Vec<(&str, serde_json::Value)>) -> Reply {
        let calls: Vec<ToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(i, (n, a))| ToolCall {
                id: format!("c{i}"),
                name: n.into(),
                args: a,
            })
            .collect();
        Reply {
            text: text.into(),
            calls,
            usage: Usage::default(),
            stop: Some("stop".into()),
            refusal: None,
            message: Message {
                role: Role::Assistant,
                parts: vec![],
                native: None,
            },
        }
    }

    #[test]
    fn tool_calls_become_actions_and_bad_ones_a_reason() {
        let tools = actions::tools(&roles());
        let r = read(
            &reply(
                "",
                vec![
                    ("type", json!({"text": "hi"})),
                    ("key", json!({"key": "enter"})),
                ],
            ),
            Mode::Tools,
            &roles(),
            &tools,
        );
        assert_eq!(r.actions.unwrap().len(), 2);
        assert!(r.results.iter().all(|x| x.content.starts_with("executed")));
        let r = read(
            &reply("", vec![("fly", json!({}))]),
            Mode::Tools,
            &roles(),
            &tools,
        );
        let why = r.actions.unwrap_err();
        assert!(
            why.contains("unknown tool 'fly'") && why.contains("click"),
            "{why}"
        );
        assert!(
            r.results[0]
                .content
                .starts_with("not executed: unknown tool")
        );
        let r = read(
            &reply("", vec![("click", json!("{bad"))]),
            Mode::Tools,
            &roles(),
            &tools,
        );
        assert!(r.actions.unwrap_err().contains("not a JSON object"));
        let r = read(
            &reply("", vec![("Done", json!({}))]),
            Mode::Tools,
            &roles(),
            &tools,
        );
        assert_eq!(
            r.actions.unwrap(),
            vec![AgentAction::Complete],
            "names as actions::parse reads them"
        );
        let sub = env_tools("desktop", Platform::Linux);
        let r = read(
            &reply("", vec![("complete", json!({}))]),
            Mode::Tools,
            &roles(),
            &sub,
        );
        assert!(
            r.actions.unwrap_err().contains("unknown tool 'complete'"),
            "only the tools offered"
        );
        // A tool model that wrote JSON in text is understood; prose alone is not.
        let r = read(
            &reply("{\"action\": \"complete\"}", vec![]),
            Mode::Tools,
            &roles(),
            &tools,
        );
        assert_eq!(r.actions.unwrap(), vec![AgentAction::Complete]);
        assert!(
            read(
                &reply("I think it is done.", vec![]),
                Mode::Tools,
                &roles(),
                &tools
            )
            .actions
            .unwrap_err()
            .contains("called no tool")
        );
        // JSON mode reads text only, and only the actions offered.
        let r = read(
            &reply(
                "Click OK: {\"action\": \"click\", \"target\": {\"element\": 2}}",
                vec![],
            ),
            Mode::Json,
            &roles(),
            &tools,
        );
        assert_eq!(
            r.actions.unwrap(),
            vec![AgentAction::Click {
                env: "desktop".into(),
                target: actions::Target::Element { element: 2 }
            }]
        );
        assert!(
            read(
                &reply("{\"action\": \"complete\"}", vec![]),
                Mode::Json,
                &roles(),
                &sub
            )
            .actions
            .unwrap_err()
            .contains("not an action here")
        );
    }

    #[test]
    fn a_refusal_is_no_action_whatever_came_with_it() {
        let tools = actions::tools(&roles());
        let mut r = reply(
            "Sure, clicking",
            vec![("click", json!({"target": {"element": 2}}))],
        );
        r.refusal = Some(super::super::wire::Refusal {
            text: "This request was declined.".into(),
            marker: Some("stop_reason refusal".into()),
        });
        let read = read(&r, Mode::Tools, &roles(), &tools);
        assert_eq!(
            read.actions,
            Err("the model refused: This request was declined. (stop_reason refusal)".into())
        );
        assert!(
            read.results.is_empty(),
            "the turn is withdrawn, its call with it"
        );
    }

    #[test]
    fn main_agent_orders_are_read_from_calls_or_json() {
        let two: Roles = [
            ("desktop".to_owned(), Platform::Linux),
            ("desktop2".to_owned(), Platform::Linux),
        ]
        .into();
        let (o, c) = read_main(
            &reply(
                "",
                vec![(
                    DELEGATE,
                    json!({"env": "desktop2", "instruction": "open Files"}),
                )],
            ),
            Mode::Tools,
            &two,
        );
        assert!(matches!(o, Ok(Order::Delegate { ref env, .. }) if env == "desktop2"));
        assert_eq!(c.map(|c| c.id), Some("c0".into()));
        let (o, _) = read_main(
            &reply(
                "",
                vec![(DELEGATE, json!({"env": "phone", "instruction": "x"}))],
            ),
            Mode::Tools,
            &two,
        );
        assert!(o.err().unwrap().contains("not one of desktop, desktop2"));
        let (o, _) = read_main(&reply("", vec![("click", json!({}))]), Mode::Tools, &two);
        assert!(o.err().unwrap().contains("unknown tool 'click'"));
        let (o, _) = read_main(
            &reply("Done. {\"action\": \"complete\"}", vec![]),
            Mode::Json,
            &two,
        );
        assert!(matches!(o, Ok(Order::Meta(AgentAction::Complete))));
        let (o, _) = read_main(
            &reply("{\"env\": \"desktop\", \"instruction\": \"save\"}", vec![]),
            Mode::Json,
            &two,
        );
        assert!(matches!(o, Ok(Order::Delegate { .. })));
        assert!(
            main_tools(&TaskBrief {
                id: "t".into(),
                instruction: "i".into(),
                tools: actions::tools(&two),
                roles: two.clone(),
                env_names: BTreeMap::new(),
                oracle: None,
                max_steps: 3
            })
            .iter()
            .map(|t| t.name.as_str())
            .eq(["delegate", "complete", "submit", "infeasible"])
        );
        assert!(
            env_tools("desktop", Platform::Linux)
                .iter()
                .all(|t| !META_TOOLS.contains(&t.name.as_str())
                    && t.parameters["properties"].get("env").is_none())
        );
    }
}
