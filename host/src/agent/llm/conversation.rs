//! A chat with one model role, independent of the provider: messages made of text, images,
//! tool calls and tool results, and the window of it that is sent. The window keeps the
//! last `history` turns before the current one; images of older turns are dropped (they
//! dominate the prompt), and results of tool calls whose turn fell out of the window become
//! plain text so that every API still sees each result after its call.

use super::super::ToolSpec;
use std::sync::Arc;

/// A PNG image with the trajectory file it is saved as.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Image {
    /// The PNG bytes.
    pub(crate) png: Arc<[u8]>,
    /// Its file name in the trajectory directory ("step-003-desktop-marks.png").
    pub(crate) name: String,
}

impl Image {
    /// What stands for the image in stored exchanges.
    pub(crate) fn reference(&self) -> String {
        format!("<image {}>", self.name)
    }
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCall {
    /// The API's id for it (made up when the API gives none).
    pub(crate) id: String,
    /// The tool.
    pub(crate) name: String,
    /// Its arguments: an object, or the raw string when the model's JSON did not parse.
    pub(crate) args: serde_json::Value,
}

/// What became of a tool call, told to the model in its next turn.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolResult {
    /// The call's id.
    pub(crate) id: String,
    /// The call's tool (Gemini matches results by name).
    pub(crate) name: String,
    /// What happened.
    pub(crate) content: String,
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    /// Text.
    Text(String),
    /// An image (user messages).
    Image(Image),
    /// A tool call (assistant messages).
    Call(ToolCall),
    /// The result of a tool call of the previous assistant message (user messages).
    Result(ToolResult),
}

/// Who speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// pincer.
    User,
    /// The model.
    Assistant,
}

/// One message.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Message {
    /// Who speaks.
    pub(crate) role: Role,
    /// What was said.
    pub(crate) parts: Vec<Part>,
    /// The assistant message exactly as the API returned it, sent back verbatim when the
    /// API wants its own blocks echoed (Anthropic thinking blocks, Gemini thought
    /// signatures).
    pub(crate) native: Option<serde_json::Value>,
}

impl Message {
    /// A user message.
    pub(crate) fn user(parts: Vec<Part>) -> Self {
        Self {
            role: Role::User,
            parts,
            native: None,
        }
    }

    /// The message's text parts, joined.
    pub(crate) fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }
}

/// A chat with one model role.
#[derive(Debug, Clone)]
pub(crate) struct Conversation {
    /// The system prompt.
    pub(crate) system: String,
    /// The tools offered (empty: the model answers in text).
    pub(crate) tools: Vec<ToolSpec>,
    /// Earlier turns kept besides the current one.
    history: usize,
    /// Every message so far, user and assistant alternating, user first.
    messages: Vec<Message>,
    /// Results owed for the last assistant message's tool calls.
    owed: Vec<ToolResult>,
}

impl Conversation {
    pub(crate) fn new(system: String, tools: Vec<ToolSpec>, history: usize) -> Self {
        Self {
            system,
            tools,
            history,
            messages: Vec::new(),
            owed: Vec::new(),
        }
    }

    /// Starts a turn: the results owed for the previous calls, then `parts`.
    pub(crate) fn ask(&mut self, parts: Vec<Part>) {
        let mut all: Vec<Part> = self.owed.drain(..).map(Part::Result).collect();
        all.extend(parts);
        self.messages.push(Message::user(all));
    }

    /// Records the model's reply. An empty one is stored as a note: the APIs reject empty
    /// messages in the history.
    pub(crate) fn answer(&mut self, mut reply: Message) {
        if reply.parts.is_empty() {
            reply.parts.push(Part::Text("(no reply)".into()));
            reply.native = None;
        }
        self.messages.push(reply);
    }

    /// Takes back the turn just asked, whose reply was refused: the APIs refuse again while
    /// the refused prompt stays in the history (Anthropic says to remove it). The tool
    /// results it carried are owed again, so the calls they answer are still answered.
    pub(crate) fn withdraw(&mut self) {
        if self.messages.last().is_some_and(|m| m.role == Role::User) {
            let prompt = self.messages.pop().into_iter().flat_map(|m| m.parts);
            self.owed = prompt
                .filter_map(|p| match p {
                    Part::Result(r) => Some(r),
                    _ => None,
                })
                .collect();
        }
    }

    /// Says what became of the last reply's tool calls (told at the next turn).
    pub(crate) fn settle(&mut self, results: Vec<ToolResult>) {
        self.owed = results;
    }

    /// The messages to send: the last `history` turns and the current one.
    pub(crate) fn window(&self) -> Vec<Message> {
        let user_at: Vec<usize> = self
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::User)
            .map(|(i, _)| i)
            .collect();
        let Some(&last_user) = user_at.last() else {
            return Vec::new();
        };
        let first = user_at[user_at.len().saturating_sub(self.history + 1)];
        let mut out: Vec<Message> = self.messages[first..].to_vec();
        for (i, m) in out.iter_mut().enumerate() {
            let current = first + i == last_user;
            let oldest = i == 0;
            if current && !oldest {
                continue;
            }
            m.parts = std::mem::take(&mut m.parts)
                .into_iter()
                .map(|p| match p {
                    Part::Image(img) if !current => {
                        Part::Text(format!("(screenshot {} omitted)", img.name))
                    }
                    // The call this answers is no longer in the window.
                    Part::Result(r) if oldest => Part::Text(format!(
                        "(result of your earlier {} call: {})",
                        r.name, r.content
                    )),
                    other => other,
                })
                .collect();
        }
        out
    }

    /// How many messages were exchanged (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.messages.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(n: u32) -> Part {
        Part::Image(Image {
            png: Arc::from(vec![0u8; 4]),
            name: format!("step-{n:03}-desktop-marks.png"),
        })
    }

    fn reply(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            parts: vec![Part::Call(ToolCall {
                id: id.into(),
                name: "click".into(),
                args: serde_json::json!({"target": {"element": 1}}),
            })],
            native: None,
        }
    }

    /// One observation, a click called on it, and the click executed.
    fn first_turn(c: &mut Conversation) {
        c.ask(vec![Part::Text("obs 1".into())]);
        c.answer(reply("a"));
        c.settle(vec![ToolResult {
            id: "a".into(),
            name: "click".into(),
            content: "executed".into(),
        }]);
    }

    #[test]
    fn the_window_keeps_recent_turns_and_only_the_current_images() {
        let mut c = Conversation::new("sys".into(), Vec::new(), 2);
        for n in 1..=4 {
            c.ask(vec![Part::Text(format!("obs {n}")), image(n)]);
            c.answer(reply(&format!("c{n}")));
            c.settle(vec![ToolResult {
                id: format!("c{n}"),
                name: "click".into(),
                content: "executed".into(),
            }]);
        }
        c.ask(vec![Part::Text("obs 5".into()), image(5)]);
        assert_eq!(c.len(), 9);
        let w = c.window();
        // Turns 3 and 4 and the current one.
        assert_eq!(w.len(), 5);
        assert_eq!(w[0].role, Role::User);
        // The oldest kept turn answers a call that is gone: its result is text now.
        assert!(matches!(&w[0].parts[0], Part::Text(t) if t.contains("earlier click call")));
        assert!(
            w[0].parts
                .iter()
                .any(|p| matches!(p, Part::Text(t) if t == "obs 3"))
        );
        // Older images are notes; the current turn keeps its image and its result.
        assert!(
            w[..4]
                .iter()
                .all(|m| !m.parts.iter().any(|p| matches!(p, Part::Image(_))))
        );
        assert!(w[2].parts.iter().any(
            |p| matches!(p, Part::Text(t) if t.contains("step-004-desktop-marks.png omitted"))
        ));
        assert!(matches!(&w[4].parts[0], Part::Result(r) if r.id == "c4"));
        assert!(matches!(&w[4].parts[2], Part::Image(i) if i.name == "step-005-desktop-marks.png"));
    }

    #[test]
    fn a_withdrawn_turn_leaves_no_trace_but_its_results_stay_owed() {
        let mut c = Conversation::new("sys".into(), Vec::new(), 5);
        first_turn(&mut c);
        c.ask(vec![Part::Text("obs 2 (refused)".into()), image(2)]);
        c.withdraw();
        assert_eq!(c.len(), 2, "the refused prompt is gone");
        c.ask(vec![Part::Text("obs 3".into())]);
        let w = c.window();
        assert_eq!(w.len(), 3);
        assert!(
            matches!(&w[2].parts[0], Part::Result(r) if r.id == "a"),
            "the call before the refusal is still answered"
        );
        assert!(w.iter().all(|m| !m.text().contains("refused")));
    }

    #[test]
    fn no_history_sends_only_the_current_turn() {
        let mut c = Conversation::new("sys".into(), Vec::new(), 0);
        first_turn(&mut c);
        c.ask(vec![Part::Text("obs 2".into()), image(2)]);
        let w = c.window();
        assert_eq!(w.len(), 1);
        assert!(matches!(&w[0].parts[0], Part::Text(t) if t.contains("earlier click call")));
        assert!(
            matches!(&w[0].parts[2], Part::Image(_)),
            "the current image stays"
        );
        c.answer(Message {
            role: Role::Assistant,
            parts: vec![],
            native: Some(serde_json::json!([])),
        });
        let w = c.window();
        assert_eq!(w.last().map(Message::text).as_deref(), Some("(no reply)"));
    }
}
