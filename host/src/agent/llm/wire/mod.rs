//! The three wire formats, pure: a provider-neutral [`Chat`] encoded as each API's request
//! body, and each API's response body decoded into a [`Reply`]. No sockets here; the same
//! encoder writes the request that is sent (images inline, base64) and the copy kept in
//! the trajectory (images as `<image FILE>` references).

mod anthropic;
mod gemini;
mod openai;

pub(crate) use anthropic::Version as AnthropicVersion;

use super::Provider;
use super::conversation::{Message, ToolCall};
use crate::agent::{ToolSpec, Usage};
use base64::Engine as _;

/// One request to a model.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chat<'a> {
    /// The model name.
    pub(crate) model: &'a str,
    /// The system prompt.
    pub(crate) system: &'a str,
    /// The conversation window, user first.
    pub(crate) messages: &'a [Message],
    /// Tools offered; none means a text reply.
    pub(crate) tools: &'a [ToolSpec],
    /// Sampling temperature, if set.
    pub(crate) temperature: Option<f64>,
    /// Most output tokens, if set.
    pub(crate) max_tokens: Option<u32>,
    /// Talking to OpenAI itself, which wants `max_completion_tokens`; compatible servers
    /// know only `max_tokens`.
    pub(crate) openai_official: bool,
}

/// How images are written into a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Images {
    /// Base64 PNG data: what is sent.
    Inline,
    /// `<image FILE>` references: what is stored.
    Reference,
}

impl Images {
    fn data(self, img: &super::conversation::Image) -> String {
        match self {
            Self::Inline => base64::engine::general_purpose::STANDARD.encode(&img.png),
            Self::Reference => img.reference(),
        }
    }
}

/// A model's answer, decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    /// Its text (reasoning, a plan, or JSON-in-text actions).
    pub(crate) text: String,
    /// Its tool calls, in order.
    pub(crate) calls: Vec<ToolCall>,
    /// Tokens of this call.
    pub(crate) usage: Usage,
    /// Why generation stopped, as the API says it.
    pub(crate) stop: Option<String>,
    /// Set when the model, or the provider's safety system, declined to answer: whatever
    /// text or calls came with it are not an answer.
    pub(crate) refusal: Option<Refusal>,
    /// The reply as a message for the conversation.
    pub(crate) message: Message,
}

/// A declined answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// What the provider said about it, or what is known when it says nothing.
    pub(crate) text: String,
    /// The response field that marks it, when the text does not show it
    /// ("stop_reason refusal, category cyber").
    pub(crate) marker: Option<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)?;
        match &self.marker {
            Some(m) => write!(f, " ({m})"),
            None => Ok(()),
        }
    }
}

/// A response body that is not what the API documents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected response: {0}")]
pub(crate) struct WireError(pub(crate) String);

/// The request path under the base URL.
pub(crate) fn path(provider: Provider, model: &str) -> String {
    match provider {
        Provider::OpenAi => "/chat/completions".into(),
        Provider::Anthropic => "/v1/messages".into(),
        Provider::Gemini => format!("/models/{model}:generateContent"),
    }
}

/// The request body.
pub(crate) fn encode(provider: Provider, chat: &Chat<'_>, images: Images) -> serde_json::Value {
    match provider {
        Provider::OpenAi => openai::encode(chat, images),
        Provider::Anthropic => anthropic::encode(chat, images),
        Provider::Gemini => gemini::encode(chat, images),
    }
}

/// The reply in a successful response body.
pub(crate) fn decode(provider: Provider, body: &serde_json::Value) -> Result<Reply, WireError> {
    match provider {
        Provider::OpenAi => openai::decode(body),
        Provider::Anthropic => anthropic::decode(body),
        Provider::Gemini => gemini::decode(body),
    }
}

/// The message of an error response (`{"error": {"message": ...}}` in all three APIs), or
/// the start of the body.
pub(crate) fn error_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .or_else(|| e.as_str().map(str::to_owned))
    });
    let text = msg.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let text = text.trim();
    if text.chars().count() > 500 {
        format!("{}...", text.chars().take(500).collect::<String>())
    } else {
        text.to_owned()
    }
}

/// How long an error body asks the client to wait: the `retryDelay` of a
/// `google.rpc.RetryInfo` entry in `error.details` (Gemini's quota 429 carries its wait
/// there, not in a header).
pub(crate) fn retry_delay(body: &[u8]) -> Option<std::time::Duration> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("error")?
        .get("details")?
        .as_array()?
        .iter()
        .find(|d| {
            d.get("@type").and_then(serde_json::Value::as_str)
                == Some("type.googleapis.com/google.rpc.RetryInfo")
        })?
        .get("retryDelay")?
        .as_str()
        .and_then(protobuf_duration)
}

/// A `google.protobuf.Duration` in its JSON form: seconds with up to nine fractional
/// digits and an `s` ("37s", "1.5s"). Negative or malformed ones are none.
fn protobuf_duration(s: &str) -> Option<std::time::Duration> {
    let secs = s.strip_suffix('s')?;
    let (whole, frac) = secs.split_once('.').unwrap_or((secs, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 9 {
        return None;
    }
    let nanos = format!("{frac:0<9}").parse::<u32>().ok()?;
    Some(std::time::Duration::new(whole.parse().ok()?, nanos))
}

/// A tool call's arguments from a JSON string (OpenAI sends them as text); the raw string
/// when it does not parse, so the agent can say so.
fn arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_owned()))
}

/// The trimmed, non-empty string at `key`.
fn text_at<'a>(v: Option<&'a serde_json::Value>, key: &str) -> Option<&'a str> {
    v?.get(key)?
        .as_str()
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

fn u64_at(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::conversation::{Image, Part, Role, ToolResult};
    use super::*;
    use std::sync::Arc;

    /// A real 3x2 PNG.
    pub(crate) fn png() -> Arc<[u8]> {
        Arc::from(crate::agent::som::png(&[200u8; 3 * 2 * 3], 3, 2).expect("png"))
    }

    pub(crate) fn tools() -> Vec<ToolSpec> {
        let roles = [("desktop".to_owned(), pincer_shared::Platform::Linux)].into();
        crate::agent::actions::tools(&roles)
    }

    /// Two turns: an observation with an image, a tool call, its result and a new
    /// observation.
    pub(crate) fn messages() -> Vec<Message> {
        let img = |n: u32| {
            Part::Image(Image {
                png: png(),
                name: format!("step-00{n}-desktop-marks.png"),
            })
        };
        vec![
            Message::user(vec![Part::Text("obs 1".into()), img(1)]),
            Message {
                role: Role::Assistant,
                parts: vec![
                    Part::Text("I click OK.".into()),
                    Part::Call(ToolCall {
                        id: "call_1".into(),
                        name: "click".into(),
                        args: serde_json::json!({"target": {"element": 4}}),
                    }),
                ],
                native: None,
            },
            Message::user(vec![
                Part::Result(ToolResult {
                    id: "call_1".into(),
                    name: "click".into(),
                    content: "executed".into(),
                }),
                Part::Text("obs 2".into()),
                img(2),
            ]),
        ]
    }

    pub(crate) fn chat<'a>(messages: &'a [Message], tools: &'a [ToolSpec]) -> Chat<'a> {
        Chat {
            model: "m1",
            system: "SYSTEM PROMPT",
            messages,
            tools,
            temperature: Some(0.5),
            max_tokens: Some(300),
            openai_official: false,
        }
    }

    /// Decodes base64 and checks it is the test PNG.
    pub(crate) fn is_png(b64: &str) -> bool {
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .is_ok_and(|b| b.starts_with(b"\x89PNG\r\n\x1a\n") && b[..] == png()[..])
    }

    #[test]
    fn error_messages_are_found_in_every_api_shape() {
        assert_eq!(
            error_message(br#"{"error": {"message": "Rate limit reached", "type": "requests"}}"#),
            "Rate limit reached"
        );
        assert_eq!(error_message(br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#), "Overloaded");
        assert_eq!(
            error_message(br#"{"error": "model not found"}"#),
            "model not found"
        );
        assert_eq!(
            error_message(b"<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
        assert!(error_message(&[b'x'; 2000]).ends_with("..."));
    }

    #[test]
    fn a_retry_info_delay_is_read_from_the_error_details() {
        use std::time::Duration;
        // Gemini's quota 429 as recorded in RooCodeInc/Roo-Code#3883.
        let quota = |delay: &str| {
            serde_json::json!({"error": {
                "code": 429,
                "message": "You exceeded your current quota, please check your plan and billing details.",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
                        "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
                        "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier",
                        "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                        "quotaValue": "250000"
                    }]},
                    {"@type": "type.googleapis.com/google.rpc.Help", "links": [{
                        "description": "Learn more about Gemini API quotas",
                        "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
                    }]},
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
                ]
            }})
            .to_string()
        };
        let delay = |d: &str| retry_delay(quota(d).as_bytes());
        assert_eq!(delay("26s"), Some(Duration::from_secs(26)));
        assert_eq!(delay("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(delay("0.000000001s"), Some(Duration::from_nanos(1)));
        for bad in ["26", "-3s", "1.5.2s", "s", ".5s", "1.0000000001s", "1e3s"] {
            assert_eq!(delay(bad), None, "{bad}");
        }
        assert_eq!(
            retry_delay(br#"{"error": {"message": "Rate limit reached", "type": "requests"}}"#),
            None
        );
        assert_eq!(retry_delay(b"<html>429</html>"), None);
    }

    #[test]
    fn stored_requests_reference_images_instead_of_inlining_them() {
        let m = messages();
        let t = tools();
        for p in [Provider::OpenAi, Provider::Anthropic, Provider::Gemini] {
            let inline = encode(p, &chat(&m, &t), Images::Inline).to_string();
            let stored = encode(p, &chat(&m, &t), Images::Reference).to_string();
            let b64 = base64::engine::general_purpose::STANDARD.encode(png());
            assert!(inline.contains(&b64), "{p}: the request carries the PNG");
            assert!(!stored.contains(&b64), "{p}: the stored copy does not");
            assert!(
                stored.contains("<image step-002-desktop-marks.png>"),
                "{p}: {stored}"
            );
        }
    }
}
