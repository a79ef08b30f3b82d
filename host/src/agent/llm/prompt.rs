//! What the models are told: the system prompt of each model role (the task, the
//! environments and their platforms, the rules) and each turn's observation (feedback on
//! the last turn, every view's element list and tree text, the images).

use super::Mode;
use super::conversation::{Image, Part};
use crate::agent::{Observation, TaskBrief, ToolSpec, View};
use pincer_shared::Platform;
use std::fmt::Write as _;
use std::sync::Arc;

/// The tool names that end or answer a task.
pub(crate) const META_TOOLS: [&str; 3] = ["complete", "submit", "infeasible"];

fn platform(p: Platform) -> &'static str {
    match p {
        Platform::Linux => "a Linux desktop",
        Platform::Android => "an Android phone",
    }
}

fn environments(brief: &TaskBrief) -> String {
    let mut out = String::new();
    for (role, p) in &brief.roles {
        let _ = writeln!(out, "- {role}: {}", platform(*p));
    }
    out
}

const SEEING: &str = "Each turn you are shown each environment: a screenshot with numbered boxes (Set-of-Marks) over its interactive elements when available, the list of those elements as `[N] role \"name\"`, and sometimes its accessibility tree as text.";

fn rules(brief: &TaskBrief, mode: Mode) -> String {
    let many = brief.roles.len() > 1;
    let mut r = String::from("Rules:\n");
    match mode {
        Mode::Tools => r.push_str("- Act by calling a tool: one action per turn. Call several tools in one turn only when they surely belong together (type, then press enter); they run in order.\n"),
        Mode::Json => r.push_str("- Act by replying with one JSON object naming the action (a list of objects only when they surely belong together). You may think in a sentence first; the first JSON value in your reply is executed.\n"),
    }
    r.push_str("- Name elements by their number: {\"element\": 4}. Use screen pixels {\"x\": X, \"y\": Y} only when no element fits.\n");
    if many {
        r.push_str("- Say which environment every action is for with \"env\".\n");
    }
    let _ = writeln!(
        r,
        "- You have at most {} actions. After each one you see the new state.",
        brief.max_steps
    );
    r.push_str("- When the task is done, call `complete`. If the task asks for an answer, give it with `submit` (then `complete`). If the task cannot be done, call `infeasible` with the reason.\n");
    r
}

/// The tools as text, for models answering in JSON.
pub(crate) fn json_actions(tools: &[ToolSpec]) -> String {
    let mut out = String::from(
        "Actions (reply with a JSON object, e.g. {\"action\": \"click\", \"target\": {\"element\": 4}}):\n",
    );
    for t in tools {
        let props = t.parameters.get("properties").and_then(|p| p.as_object());
        let required: Vec<&str> = t
            .parameters
            .get("required")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str())
            .collect();
        let fields: Vec<String> = props
            .into_iter()
            .flatten()
            .map(|(name, schema)| {
                let ty = schema
                    .get("type")
                    .and_then(|t| t.as_str())
                    .unwrap_or("value");
                let ty = if name == "target" || name == "from" || name == "to" {
                    "{\"element\": N} or {\"x\": X, \"y\": Y}"
                } else {
                    ty
                };
                let opt = if required.contains(&name.as_str()) {
                    ""
                } else {
                    ", optional"
                };
                let choices = schema
                    .get("enum")
                    .map(|e| format!(", one of {e}"))
                    .unwrap_or_default();
                format!("\"{name}\": {ty}{opt}{choices}")
            })
            .collect();
        let _ = writeln!(
            out,
            "- \"{}\": {} {}",
            t.name,
            t.description,
            if fields.is_empty() {
                String::new()
            } else {
                format!("Fields: {}.", fields.join("; "))
            }
        );
    }
    out
}

fn head(brief: &TaskBrief, what: &str) -> String {
    format!(
        "{what}\n\nTask: {}\n\nEnvironments:\n{}\n{SEEING}\n",
        brief.instruction,
        environments(brief)
    )
}

/// The one agent of `structure=single`.
pub(crate) fn single(brief: &TaskBrief, mode: Mode, tools: &[ToolSpec]) -> String {
    let mut s = head(
        brief,
        "You are an agent operating computers through their graphical interfaces to complete a task.",
    );
    s.push('\n');
    s.push_str(&rules(brief, mode));
    if mode == Mode::Json {
        s.push('\n');
        s.push_str(&json_actions(tools));
    }
    s
}

/// The planner of `structure=planner`: words, no tools.
pub(crate) fn planner(brief: &TaskBrief) -> String {
    let mut s = head(
        brief,
        "You are the planner of a team operating computers through their graphical interfaces to complete a task. A tool agent carries out your instructions; it sees the element lists but not the screenshots.",
    );
    s.push_str(
        "\nEach turn, reply with the single next step for the tool agent, concretely, in one or two sentences, naming elements by number (\"Click element 12, the Save button\") and, with several environments, the environment. \
         When the task is done, say \"The task is done: call complete.\" If it asks for an answer, say \"Submit the answer: ...\". If it cannot be done, say \"The task is infeasible because ...\".\n",
    );
    let _ = writeln!(
        s,
        "At most {} actions may be taken in all.",
        brief.max_steps
    );
    s
}

/// The tool agent of `structure=planner`.
pub(crate) fn tool_agent(brief: &TaskBrief, mode: Mode, tools: &[ToolSpec]) -> String {
    let mut s = head(
        brief,
        "You are the tool agent of a team operating computers through their graphical interfaces. A planner tells you the next step; you carry it out with exactly the action it describes.",
    );
    s.push('\n');
    s.push_str(&rules(brief, mode));
    if mode == Mode::Json {
        s.push('\n');
        s.push_str(&json_actions(tools));
    }
    s
}

/// The main agent of `structure=per-env`.
pub(crate) fn main_agent(brief: &TaskBrief, mode: Mode, tools: &[ToolSpec]) -> String {
    let mut s = head(
        brief,
        "You are the main agent of a team operating several computers through their graphical interfaces. Each environment has its own agent that sees only that environment and acts there.",
    );
    s.push_str("\nYou see every environment's element list (not the screenshots). Each turn, choose one environment and give its agent the next sub-goal, concretely (\"Open the Files app and create a folder named reports\"), with `delegate`. ");
    s.push_str("When the whole task is done, call `complete`. If it asks for an answer, `submit` it. If it cannot be done, call `infeasible` with the reason.\n");
    let _ = writeln!(
        s,
        "At most {} actions may be taken in all.",
        brief.max_steps
    );
    if mode == Mode::Json {
        s.push_str("\nReply with one JSON object: {\"env\": \"ROLE\", \"instruction\": \"...\"} to delegate, or {\"action\": \"complete\"}, {\"action\": \"submit\", \"answer\": \"...\"}, {\"action\": \"infeasible\", \"reason\": \"...\"}.\n");
    } else {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let _ = writeln!(s, "Your tools: {}.", names.join(", "));
    }
    s
}

/// The sub-agent of one environment in `structure=per-env`.
pub(crate) fn env_agent(
    brief: &TaskBrief,
    role: &str,
    p: Platform,
    mode: Mode,
    tools: &[ToolSpec],
) -> String {
    let mut s = format!(
        "You are the agent of the environment '{role}', {}, in a team operating computers through their graphical interfaces. The overall task is: {}\n\nA main agent gives you sub-goals; carry out the next action toward the current one. {SEEING}\n\n",
        platform(p),
        brief.instruction
    );
    match mode {
        Mode::Tools => s.push_str("Act by calling a tool: one action per turn (several only when they surely belong together, such as typing and pressing enter).\n"),
        Mode::Json => s.push_str("Act by replying with one JSON object naming the action.\n"),
    }
    s.push_str("Name elements by their number: {\"element\": 4}. Use screen pixels {\"x\": X, \"y\": Y} only when no element fits. If the sub-goal is already reached, `wait` briefly.\n");
    if mode == Mode::Json {
        s.push('\n');
        s.push_str(&json_actions(tools));
    }
    s
}

/// The trajectory file name of a view's image, as the runner saves it.
pub(crate) fn image_name(decision: u32, role: &str, kind: &str) -> String {
    format!(
        "step-{decision:03}-{}-{kind}.png",
        crate::task::sanitize(role)
    )
}

/// The status line and the runner's feedback on the previous turn.
pub(crate) fn status(obs: &Observation, brief: &TaskBrief) -> String {
    let mut s = format!(
        "Actions taken so far: {} of at most {}.\n",
        obs.step, brief.max_steps
    );
    if !obs.feedback.is_empty() {
        s.push_str("Feedback on your last turn:\n");
        for f in &obs.feedback {
            let _ = writeln!(s, "- {f}");
        }
    }
    s
}

/// One view as text: its header, elements and tree.
pub(crate) fn view_text(v: &View) -> String {
    let mut s = format!(
        "\n## {} ({}, screen {}x{} pixels",
        v.role,
        platform(v.platform),
        v.screen.0,
        v.screen.1
    );
    if v.image_size != (0, 0) && v.image_size != v.screen {
        let _ = write!(
            s,
            "; images are {}x{}, scale pixel coordinates to the screen",
            v.image_size.0, v.image_size.1
        );
    }
    s.push_str(")\n");
    if v.elements.is_empty() {
        s.push_str("No interactive elements were found.\n");
    } else {
        s.push_str("Elements:\n");
        s.push_str(&crate::agent::som::list(&v.elements));
    }
    if let Some(t) = &v.tree_text {
        s.push_str("UI tree:\n");
        s.push_str(t);
    }
    s
}

/// A view's images as parts, each after a caption.
pub(crate) fn view_images(v: &View, decision: u32) -> Vec<Part> {
    let mut parts = Vec::new();
    for (kind, caption, bytes) in [
        ("marks", "Marked screenshot", &v.marked),
        ("screenshot", "Screenshot", &v.screenshot),
    ] {
        if let Some(png) = bytes {
            parts.push(Part::Text(format!("{caption} of {}:", v.role)));
            parts.push(Part::Image(Image {
                png: Arc::from(png.as_slice()),
                name: image_name(decision, &v.role, kind),
            }));
        }
    }
    for (i, still) in v.video.iter().enumerate() {
        parts.push(Part::Text(format!(
            "{} as it was {} ms before this observation:",
            v.role, still.ago_ms
        )));
        parts.push(Part::Image(Image {
            png: Arc::from(still.png.as_slice()),
            name: image_name(decision, &v.role, &format!("video-{i:02}")),
        }));
    }
    parts
}

/// A turn's observation of these views: text first, then images if wanted.
pub(crate) fn observation(
    obs: &Observation,
    brief: &TaskBrief,
    views: &[&View],
    decision: u32,
    images: bool,
    preface: Option<String>,
) -> Vec<Part> {
    let mut text = preface.unwrap_or_default();
    text.push_str(&status(obs, brief));
    for v in views {
        text.push_str(&view_text(v));
    }
    let mut parts = vec![Part::Text(text)];
    if images {
        for v in views {
            parts.extend(view_images(v, decision));
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::som::Element;
    use pincer_shared::observe::Rect;

    pub(crate) fn brief() -> TaskBrief {
        let roles = [
            ("desktop".to_owned(), Platform::Linux),
            ("phone".to_owned(), Platform::Android),
        ]
        .into();
        TaskBrief {
            id: "t".into(),
            instruction: "Save the note as todo.txt".into(),
            tools: crate::agent::actions::tools(&roles),
            roles,
            env_names: std::collections::BTreeMap::new(),
            oracle: None,
            max_steps: 12,
        }
    }

    #[test]
    fn the_system_prompt_states_task_environments_and_rules() {
        let b = brief();
        let s = single(&b, Mode::Tools, &b.tools);
        for want in [
            "Task: Save the note as todo.txt",
            "- desktop: a Linux desktop",
            "- phone: an Android phone",
            "at most 12 actions",
            "`complete`",
            "`submit`",
            "`infeasible`",
            "\"env\"",
            "{\"element\": 4}",
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        let j = single(&b, Mode::Json, &b.tools);
        assert!(
            j.contains("- \"click\": Left-click")
                && j.contains("\"env\": string, one of [\"desktop\"]"),
            "{j}"
        );
        assert!(
            j.contains("\"target\": {\"element\": N} or {\"x\": X, \"y\": Y}"),
            "{j}"
        );
        assert!(planner(&b).contains("next step for the tool agent"));
        assert!(
            env_agent(&b, "phone", Platform::Android, Mode::Tools, &[])
                .contains("'phone', an Android phone")
        );
    }

    #[test]
    fn observations_list_feedback_elements_and_images_with_their_file_names() {
        let view = View {
            role: "desktop".into(),
            platform: Platform::Linux,
            screen: (1920, 1080),
            image_size: (960, 540),
            screenshot: None,
            marked: Some(vec![1, 2, 3]),
            elements: vec![Element {
                id: 1,
                role: "push button".into(),
                name: "OK".into(),
                text: None,
                states: vec![],
                bounds: Rect::new(0, 0, 10, 10),
            }],
            tree: None,
            tree_text: Some("frame \"Win\"\n".into()),
            video: Vec::new(),
            build_ms: 0.0,
        };
        let obs = Observation {
            step: 3,
            views: vec![view.clone()],
            feedback: vec!["click element 9 failed: there is no element 9".into()],
            checkpoints: vec![],
            checkpoint_feedback: std::collections::BTreeMap::new(),
        };
        let parts = observation(&obs, &brief(), &[&view], 4, true, None);
        let Part::Text(t) = &parts[0] else {
            panic!("text first")
        };
        for want in [
            "3 of at most 12",
            "- click element 9 failed",
            "## desktop (a Linux desktop, screen 1920x1080",
            "images are 960x540",
            "[1] push button \"OK\"",
            "UI tree:\nframe",
        ] {
            assert!(t.contains(want), "missing {want:?} in\n{t}");
        }
        assert!(
            matches!(&parts[2], Part::Image(i) if i.name == "step-004-desktop-marks.png" && i.png[..] == [1, 2, 3])
        );
        assert_eq!(
            observation(&obs, &brief(), &[&view], 4, false, None).len(),
            1
        );
        // The screen's last moments follow, oldest first, each with how long ago it was.
        let mut view = view;
        view.video = vec![
            crate::agent::observe::Still {
                ago_ms: 400,
                png: vec![4],
            },
            crate::agent::observe::Still {
                ago_ms: 0,
                png: vec![5],
            },
        ];
        let parts = view_images(&view, 4);
        assert!(
            matches!(&parts[2], Part::Text(t) if t == "desktop as it was 400 ms before this observation:")
        );
        assert!(
            matches!(&parts[3], Part::Image(i) if i.name == "step-004-desktop-video-00.png" && i.png[..] == [4])
        );
        assert!(matches!(&parts[5], Part::Image(i) if i.png[..] == [5]));
    }
}
