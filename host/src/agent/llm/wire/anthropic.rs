//! Anthropic Messages: `system` beside the messages, content blocks, `tool_result` blocks
//! opening the user turn after the `tool_use` blocks, images as base64 `image` blocks, and
//! `max_tokens` always given. Assistant turns are echoed with the API's own blocks.

use super::super::conversation::{Message, Part, Role, ToolCall};
use super::{Chat, Images, Refusal, Reply, WireError, text_at, u64_at};
use crate::agent::Usage;
use serde_json::{Value, json};

/// Output tokens when the settings give none (the API requires a number).
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The `anthropic-version`s pincer speaks, oldest first. A version fixes the shapes of the
/// request and the response; each one listed is one pincer's encoder and decoder match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Version {
    /// The Messages API as it was from 2023 to October 2026.
    V2023_06_01,
    /// Removes `temperature`, `top_p` and `top_k` (a request with one gets a 400) and
    /// rejects `document` blocks in assistant turns and `citations` on user text blocks,
    /// which pincer never sends. Responses are unchanged.
    V2026_10_21,
}

impl Version {
    /// Every version, oldest first.
    pub(crate) const ALL: [Self; 2] = [Self::V2023_06_01, Self::V2026_10_21];

    /// What pincer sends unless `api_version` says otherwise: the newest version, which
    /// Anthropic recommends and its SDKs send since 2026-10-21. pincer's requests and the
    /// responses it reads are the same in both, except that this one takes no temperature.
    pub(crate) const DEFAULT: Self = Self::V2026_10_21;

    /// As written in the header.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::V2023_06_01 => "2023-06-01",
            Self::V2026_10_21 => "2026-10-21",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Whether a request may set `temperature`.
    pub(crate) fn takes_temperature(self) -> bool {
        self < Self::V2026_10_21
    }
}

pub(super) fn encode(chat: &Chat<'_>, images: Images) -> Value {
    let mut messages = Vec::new();
    for m in chat.messages {
        match (m.role, &m.native) {
            (Role::Assistant, Some(native)) => {
                messages.push(json!({"role": "assistant", "content": native}))
            }
            (role, _) => {
                let mut blocks: Vec<Value> = Vec::new();
                // tool_result blocks must open the user turn.
                for p in &m.parts {
                    if let Part::Result(r) = p {
                        blocks.push(json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content}));
                    }
                }
                for p in &m.parts {
                    match p {
                        Part::Text(t) => blocks.push(json!({"type": "text", "text": t})),
                        Part::Image(img) => blocks.push(json!({
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": images.data(img)},
                        })),
                        Part::Call(c) => blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": object(&c.args)})),
                        Part::Result(_) => {}
                    }
                }
                let role = if role == Role::User {
                    "user"
                } else {
                    "assistant"
                };
                messages.push(json!({"role": role, "content": blocks}));
            }
        }
    }
    let mut body = json!({
        "model": chat.model,
        "max_tokens": chat.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "system": chat.system,
        "messages": messages,
    });
    if !chat.tools.is_empty() {
        body["tools"] = chat
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    if let Some(t) = chat.temperature {
        // Anthropic's range is 0..1.
        body["temperature"] = json!(t.min(1.0));
    }
    body
}

/// Anthropic wants tool inputs as objects; unparsable ones are wrapped.
fn object(args: &Value) -> Value {
    match args {
        Value::Object(_) => args.clone(),
        other => json!({"raw": other}),
    }
}

pub(super) fn decode(body: &Value) -> Result<Reply, WireError> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            WireError(format!(
                "no content in {}",
                body.to_string().chars().take(300).collect::<String>()
            ))
        })?;
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut parts = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let t = b
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .trim()
                    .to_owned();
                if !t.is_empty() {
                    texts.push(t.clone());
                    parts.push(Part::Text(t));
                }
            }
            Some("tool_use") => {
                let call = ToolCall {
                    id: b
                        .get("id")
                        .and_then(Value::as_str)
                        .map_or_else(|| format!("toolu_{i}"), str::to_owned),
                    name: b
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    args: b.get("input").cloned().unwrap_or_else(|| json!({})),
                };
                parts.push(Part::Call(call.clone()));
                calls.push(call);
            }
            // Thinking blocks travel in `native`.
            _ => {}
        }
    }
    let usage = body.get("usage").map_or_else(Usage::default, |u| Usage {
        prompt: u64_at(u, "input_tokens")
            + u64_at(u, "cache_creation_input_tokens")
            + u64_at(u, "cache_read_input_tokens"),
        completion: u64_at(u, "output_tokens"),
    });
    let stop = body.get("stop_reason").and_then(Value::as_str);
    // The safety classifiers cut the reply off; what came before the cut is in `content`.
    let refusal = (stop == Some("refusal")).then(|| {
        let details = body.get("stop_details");
        Refusal {
            text: text_at(details, "explanation")
                .unwrap_or("Anthropic's safety classifiers stopped the reply")
                .to_owned(),
            marker: Some(match text_at(details, "category") {
                Some(c) => format!("stop_reason refusal, category {c}"),
                None => "stop_reason refusal".to_owned(),
            }),
        }
    });
    Ok(Reply {
        text: texts.join("\n"),
        calls,
        usage,
        stop: stop.map(str::to_owned),
        refusal,
        message: Message {
            role: Role::Assistant,
            parts,
            native: (!blocks.is_empty()).then(|| Value::Array(blocks.clone())),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{chat, is_png, messages, tools};
    use super::*;

    #[test]
    fn requests_carry_system_tools_images_and_results_first() {
        let m = messages();
        let t = tools();
        let b = encode(&chat(&m, &t), Images::Inline);
        assert_eq!(b["system"], "SYSTEM PROMPT");
        assert_eq!(b["max_tokens"], 300);
        let msgs = b["messages"].as_array().unwrap();
        assert_eq!(
            msgs.iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["user", "assistant", "user"]
        );
        assert_eq!(
            msgs[1]["content"][1],
            json!({"type": "tool_use", "id": "call_1", "name": "click", "input": {"target": {"element": 4}}})
        );
        assert_eq!(
            msgs[2]["content"][0],
            json!({"type": "tool_result", "tool_use_id": "call_1", "content": "executed"})
        );
        assert_eq!(
            msgs[2]["content"][1],
            json!({"type": "text", "text": "obs 2"})
        );
        let img = &msgs[2]["content"][2];
        assert_eq!(
            (
                img["type"].as_str(),
                img["source"]["type"].as_str(),
                img["source"]["media_type"].as_str()
            ),
            (Some("image"), Some("base64"), Some("image/png"))
        );
        assert!(is_png(img["source"]["data"].as_str().unwrap()));
        let click = b["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "click")
            .unwrap();
        assert_eq!(click["input_schema"]["type"], "object");
        let mut c = chat(&m, &[]);
        c.max_tokens = None;
        let b = encode(&c, Images::Inline);
        assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(b.get("tools").is_none());
    }

    #[test]
    fn responses_give_calls_usage_and_the_blocks_to_echo() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Typing the name."},
                {"type": "tool_use", "id": "toolu_01", "name": "type", "input": {"text": "pincer"}}
            ],
            "usage": {"input_tokens": 900, "cache_read_input_tokens": 100, "output_tokens": 25}
        });
        let r = decode(&body).unwrap();
        assert_eq!(r.text, "Typing the name.");
        assert_eq!(
            r.calls,
            vec![ToolCall {
                id: "toolu_01".into(),
                name: "type".into(),
                args: json!({"text": "pincer"})
            }]
        );
        assert_eq!(
            r.usage,
            Usage {
                prompt: 1000,
                completion: 25
            }
        );
        assert_eq!(r.stop.as_deref(), Some("tool_use"));
        // The echo keeps the thinking block the API requires back.
        let m = [Message::user(vec![Part::Text("obs".into())]), r.message];
        let b = encode(&chat(&m, &[]), Images::Inline);
        assert_eq!(b["messages"][1]["content"][0]["signature"], "sig");
        assert!(decode(&json!({"type": "error"})).is_err());
        assert_eq!(r.refusal, None);
    }

    #[test]
    fn versions_are_listed_oldest_first_and_the_newest_is_the_default() {
        assert!(Version::ALL.is_sorted_by(|a, b| a < b && a.as_str() < b.as_str()));
        assert_eq!(Some(&Version::DEFAULT), Version::ALL.last());
        for v in Version::ALL {
            assert_eq!(Version::parse(v.as_str()), Some(v));
        }
        assert_eq!(Version::parse("2024-01-01"), None);
        assert!(Version::V2023_06_01.takes_temperature());
        assert!(!Version::V2026_10_21.takes_temperature());
    }

    #[test]
    fn a_refusal_stop_is_a_refusal_with_its_explanation() {
        // The Message of anthropic-sdk-python: stop_reason "refusal" and RefusalStopDetails.
        let body = |details: Value| {
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-5-5",
                "content": [{"type": "text", "text": "Hello.."}],
                "stop_reason": "refusal", "stop_details": details,
                "usage": {"input_tokens": 10, "output_tokens": 2}
            })
        };
        let r = decode(&body(json!({"type": "refusal", "category": "cyber",
            "explanation": "This request was declined because it could enable cyber harm."})))
        .unwrap();
        assert_eq!(
            r.refusal.map(|r| r.to_string()).as_deref(),
            Some(
                "This request was declined because it could enable cyber harm. (stop_reason refusal, category cyber)"
            )
        );
        assert_eq!(r.text, "Hello..", "the text before the cut is kept as such");
        let r = decode(&body(
            json!({"type": "refusal", "category": null, "explanation": null}),
        ))
        .unwrap();
        assert_eq!(
            r.refusal.map(|r| r.to_string()).as_deref(),
            Some("Anthropic's safety classifiers stopped the reply (stop_reason refusal)")
        );
    }
}
