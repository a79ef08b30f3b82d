//! Google Gemini `generateContent`: `system_instruction`, `contents` with `user` and
//! `model` roles, `functionCall`/`functionResponse` parts matched by name, images as
//! `inline_data`, tools as `function_declarations` in Gemini's OpenAPI schema subset.
//! Model turns are echoed as returned (they carry thought signatures).

use super::super::conversation::{Message, Part, Role, ToolCall};
use super::{Chat, Images, Refusal, Reply, WireError, text_at, u64_at};
use crate::agent::Usage;
use serde_json::{Value, json};

pub(super) fn encode(chat: &Chat<'_>, images: Images) -> Value {
    let mut contents = Vec::new();
    for m in chat.messages {
        match (m.role, &m.native) {
            (Role::Assistant, Some(native)) => contents.push(native.clone()),
            (role, _) => {
                let mut parts: Vec<Value> = Vec::new();
                for p in &m.parts {
                    if let Part::Result(r) = p {
                        let mut fr = json!({"name": r.name, "response": {"result": r.content}});
                        if !r.id.starts_with("gemini_") {
                            fr["id"] = json!(r.id);
                        }
                        parts.push(json!({"functionResponse": fr}));
                    }
                }
                for p in &m.parts {
                    match p {
                        Part::Text(t) => parts.push(json!({"text": t})),
                        Part::Image(img) => parts.push(json!({"inline_data": {"mime_type": "image/png", "data": images.data(img)}})),
                        Part::Call(c) => parts.push(json!({"functionCall": {"name": c.name, "args": c.args}})),
                        Part::Result(_) => {}
                    }
                }
                let role = if role == Role::User { "user" } else { "model" };
                contents.push(json!({"role": role, "parts": parts}));
            }
        }
    }
    let mut body = json!({
        "system_instruction": {"parts": [{"text": chat.system}]},
        "contents": contents,
    });
    if !chat.tools.is_empty() {
        let decls: Vec<Value> = chat
            .tools
            .iter()
            .map(|t| {
                let mut d = json!({"name": t.name, "description": t.description});
                if let Some(p) = schema(&t.parameters) {
                    d["parameters"] = p;
                }
                d
            })
            .collect();
        body["tools"] = json!([{"function_declarations": decls}]);
    }
    let mut config = serde_json::Map::new();
    if let Some(t) = chat.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(n) = chat.max_tokens {
        config.insert("maxOutputTokens".into(), json!(n));
    }
    if !config.is_empty() {
        body["generationConfig"] = Value::Object(config);
    }
    body
}

/// A JSON Schema as Gemini takes it: objects without properties are rejected, so such
/// objects are left out and a parameterless tool gets no `parameters` at all.
fn schema(v: &Value) -> Option<Value> {
    let Value::Object(map) = v else {
        return Some(v.clone());
    };
    let mut out = serde_json::Map::new();
    for (k, val) in map {
        match (k.as_str(), val) {
            ("properties", Value::Object(props)) => {
                if props.is_empty() {
                    continue;
                }
                let cleaned: serde_json::Map<String, Value> = props
                    .iter()
                    .filter_map(|(n, s)| schema(s).map(|s| (n.clone(), s)))
                    .collect();
                out.insert(k.clone(), Value::Object(cleaned));
            }
            ("required", Value::Array(r)) if r.is_empty() => {}
            ("items", s) => {
                if let Some(s) = schema(s) {
                    out.insert(k.clone(), s);
                }
            }
            _ => {
                out.insert(k.clone(), val.clone());
            }
        }
    }
    // An object with nothing in it says nothing; Gemini rejects it.
    if out.get("type") == Some(&json!("object")) && !out.contains_key("properties") {
        return None;
    }
    Some(Value::Object(out))
}

/// The finish reasons of a candidate that Gemini's filters withheld (google-genai's
/// `FinishReason`); the others (`STOP`, `MAX_TOKENS`, `MALFORMED_FUNCTION_CALL`, ...) end
/// an answer.
const WITHHELD: [&str; 7] = [
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
];

pub(super) fn decode(body: &Value) -> Result<Reply, WireError> {
    let usage = body
        .get("usageMetadata")
        .map_or_else(Usage::default, |u| Usage {
            prompt: u64_at(u, "promptTokenCount"),
            completion: u64_at(u, "candidatesTokenCount") + u64_at(u, "thoughtsTokenCount"),
        });
    let Some(cand) = body.get("candidates").and_then(|c| c.get(0)) else {
        // A blocked prompt has no candidates; that is a refusal, not a fault.
        let feedback = body.get("promptFeedback");
        let why = text_at(feedback, "blockReason").ok_or_else(|| {
            WireError(format!(
                "no candidates in {}",
                body.to_string().chars().take(300).collect::<String>()
            ))
        })?;
        return Ok(Reply {
            text: String::new(),
            calls: Vec::new(),
            usage,
            stop: None,
            refusal: Some(Refusal {
                text: text_at(feedback, "blockReasonMessage")
                    .unwrap_or("Gemini blocked the prompt")
                    .to_owned(),
                marker: Some(format!("promptFeedback.blockReason {why}")),
            }),
            message: Message {
                role: Role::Assistant,
                parts: Vec::new(),
                native: None,
            },
        });
    };
    let content = cand
        .get("content")
        .cloned()
        .unwrap_or_else(|| json!({"role": "model", "parts": []}));
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut parts = Vec::new();
    for (i, p) in content
        .get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(fc) = p.get("functionCall") {
            let call = ToolCall {
                id: fc
                    .get("id")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("gemini_{i}"), str::to_owned),
                name: fc
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                args: fc.get("args").cloned().unwrap_or_else(|| json!({})),
            };
            parts.push(Part::Call(call.clone()));
            calls.push(call);
        } else if let Some(t) = p.get("text").and_then(Value::as_str) {
            // Thought summaries are not the answer.
            if p.get("thought").and_then(Value::as_bool) != Some(true) && !t.trim().is_empty() {
                texts.push(t.trim().to_owned());
                parts.push(Part::Text(t.trim().to_owned()));
            }
        }
    }
    let has_parts = content
        .get("parts")
        .and_then(Value::as_array)
        .is_some_and(|p| !p.is_empty());
    let stop = cand.get("finishReason").and_then(Value::as_str);
    let refusal = stop.filter(|s| WITHHELD.contains(s)).map(|s| Refusal {
        text: text_at(Some(cand), "finishMessage")
            .unwrap_or("Gemini withheld the reply")
            .to_owned(),
        marker: Some(format!("finishReason {s}")),
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
            native: has_parts.then_some(content),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{chat, is_png, messages, tools};
    use super::*;

    #[test]
    fn requests_carry_system_tools_images_and_function_responses() {
        let m = messages();
        let t = tools();
        let b = encode(&chat(&m, &t), Images::Inline);
        assert_eq!(b["system_instruction"]["parts"][0]["text"], "SYSTEM PROMPT");
        assert_eq!(
            b["generationConfig"],
            json!({"temperature": 0.5, "maxOutputTokens": 300})
        );
        let c = b["contents"].as_array().unwrap();
        assert_eq!(
            c.iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["user", "model", "user"]
        );
        assert_eq!(
            c[1]["parts"][1],
            json!({"functionCall": {"name": "click", "args": {"target": {"element": 4}}}})
        );
        assert_eq!(
            c[2]["parts"][0]["functionResponse"],
            json!({"name": "click", "id": "call_1", "response": {"result": "executed"}})
        );
        assert_eq!(c[2]["parts"][2]["inline_data"]["mime_type"], "image/png");
        assert!(is_png(
            c[2]["parts"][2]["inline_data"]["data"].as_str().unwrap()
        ));
        let decls = b["tools"][0]["function_declarations"].as_array().unwrap();
        let by = |n: &str| decls.iter().find(|d| d["name"] == n).unwrap();
        assert!(
            by("complete").get("parameters").is_none(),
            "no empty object schemas for Gemini"
        );
        assert_eq!(by("click")["parameters"]["required"], json!(["target"]));
        assert_eq!(
            by("click")["parameters"]["properties"]["target"]["properties"]["element"]["type"],
            "integer"
        );
    }

    #[test]
    fn responses_give_calls_usage_and_the_content_to_echo() {
        let body = json!({
            "candidates": [{"finishReason": "STOP", "content": {"role": "model", "parts": [
                {"text": "thinking...", "thought": true},
                {"text": "Pressing enter."},
                {"functionCall": {"name": "key", "args": {"key": "enter"}}, "thoughtSignature": "c2ln"}
            ]}}],
            "usageMetadata": {"promptTokenCount": 700, "candidatesTokenCount": 20, "thoughtsTokenCount": 5, "totalTokenCount": 725}
        });
        let r = decode(&body).unwrap();
        assert_eq!(r.text, "Pressing enter.");
        assert_eq!(
            r.calls,
            vec![ToolCall {
                id: "gemini_2".into(),
                name: "key".into(),
                args: json!({"key": "enter"})
            }]
        );
        assert_eq!(
            r.usage,
            Usage {
                prompt: 700,
                completion: 25
            }
        );
        let m = [Message::user(vec![Part::Text("obs".into())]), r.message];
        let b = encode(&chat(&m, &[]), Images::Inline);
        assert_eq!(
            b["contents"][1]["parts"][2]["thoughtSignature"], "c2ln",
            "the signature goes back"
        );
        assert_eq!(r.refusal, None);
        assert!(decode(&json!({})).is_err());
    }

    #[test]
    fn blocked_prompts_and_withheld_candidates_are_refusals() {
        let refusal = |body: Value| decode(&body).unwrap().refusal.map(|r| r.to_string());
        // GenerateContentResponse.promptFeedback of google-genai: no candidates at all.
        let blocked = json!({
            "promptFeedback": {"blockReason": "PROHIBITED_CONTENT", "safetyRatings": []},
            "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9}
        });
        assert_eq!(decode(&blocked).unwrap().usage.prompt, 9);
        assert_eq!(
            refusal(blocked).as_deref(),
            Some("Gemini blocked the prompt (promptFeedback.blockReason PROHIBITED_CONTENT)")
        );
        assert_eq!(
            refusal(json!({"promptFeedback": {"blockReason": "SAFETY",
                "blockReasonMessage": "The prompt was blocked for safety."}}))
            .as_deref(),
            Some("The prompt was blocked for safety. (promptFeedback.blockReason SAFETY)")
        );
        // A candidate the filters withheld: a finish reason, ratings, and no content.
        let withheld = |reason: &str| {
            json!({"candidates": [{"finishReason": reason, "index": 0, "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}
            ]}]})
        };
        assert_eq!(
            refusal(withheld("SAFETY")).as_deref(),
            Some("Gemini withheld the reply (finishReason SAFETY)")
        );
        let mut with_message = withheld("RECITATION");
        with_message["candidates"][0]["finishMessage"] = json!("The reply recited a source.");
        assert_eq!(
            refusal(with_message).as_deref(),
            Some("The reply recited a source. (finishReason RECITATION)")
        );
        for answered in ["STOP", "MAX_TOKENS", "MALFORMED_FUNCTION_CALL"] {
            assert_eq!(refusal(withheld(answered)), None, "{answered}");
        }
    }
}
