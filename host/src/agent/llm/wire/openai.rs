//! OpenAI Chat Completions (and the servers that copy it: vLLM, Ollama, LM Studio,
//! OpenRouter): a `system` message, `tool` messages answering each call right after the
//! assistant message, images as `image_url` data URLs, tools as `function`s.

use super::super::conversation::{Message, Part, Role, ToolCall};
use super::{Chat, Images, Refusal, Reply, WireError, arguments, text_at, u64_at};
use crate::agent::Usage;
use serde_json::{Value, json};

pub(super) fn encode(chat: &Chat<'_>, images: Images) -> Value {
    let mut messages = vec![json!({"role": "system", "content": chat.system})];
    for m in chat.messages {
        match m.role {
            Role::User => {
                // Tool results come first, as `tool` messages right after the calls.
                for p in &m.parts {
                    if let Part::Result(r) = p {
                        messages.push(
                            json!({"role": "tool", "tool_call_id": r.id, "content": r.content}),
                        );
                    }
                }
                let content: Vec<Value> = m
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(json!({"type": "text", "text": t})),
                        Part::Image(img) => {
                            let url = match images {
                                Images::Inline => {
                                    format!("data:image/png;base64,{}", images.data(img))
                                }
                                Images::Reference => img.reference(),
                            };
                            Some(json!({"type": "image_url", "image_url": {"url": url}}))
                        }
                        Part::Call(_) | Part::Result(_) => None,
                    })
                    .collect();
                if !content.is_empty() {
                    messages.push(json!({"role": "user", "content": content}));
                }
            }
            Role::Assistant => {
                let text = m.text();
                let calls: Vec<Value> = m
                    .parts
                    .iter()
                    .filter_map(|p| match p {
                        Part::Call(c) => Some(json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": match &c.args {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            }},
                        })),
                        _ => None,
                    })
                    .collect();
                let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
        }
    }
    let mut body = json!({"model": chat.model, "messages": messages});
    if !chat.tools.is_empty() {
        body["tools"] = chat
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
    }
    if let Some(t) = chat.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(n) = chat.max_tokens {
        let field = if chat.openai_official {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[field] = json!(n);
    }
    body
}

pub(super) fn decode(body: &Value) -> Result<Reply, WireError> {
    let choice = body
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| WireError(format!("no choices in {}", short(body))))?;
    let msg = choice
        .get("message")
        .ok_or_else(|| WireError("the choice has no message".into()))?;
    let text = msg
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim()
        .to_owned();
    let mut calls = Vec::new();
    for (i, c) in msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = c.get("function").unwrap_or(&Value::Null);
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let args = match f.get("arguments") {
            Some(Value::String(s)) => arguments(s),
            // Some compatible servers send an object.
            Some(v @ Value::Object(_)) => v.clone(),
            _ => json!({}),
        };
        let id = c
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("call_{i}"), str::to_owned);
        calls.push(ToolCall { id, name, args });
    }
    let usage = body.get("usage").map_or_else(Usage::default, |u| Usage {
        prompt: u64_at(u, "prompt_tokens"),
        completion: u64_at(u, "completion_tokens"),
    });
    let stop = choice.get("finish_reason").and_then(Value::as_str);
    // A refusal comes in its own field with `content` null; a content filter (Azure,
    // compatible servers) only says so in the finish reason.
    let refusal = match text_at(Some(msg), "refusal") {
        Some(said) => Some(Refusal {
            text: said.to_owned(),
            marker: None,
        }),
        None if stop == Some("content_filter") => Some(Refusal {
            text: "the provider's content filter withheld the reply".into(),
            marker: Some("finish_reason content_filter".into()),
        }),
        None => None,
    };
    let mut parts = Vec::new();
    if !text.is_empty() {
        parts.push(Part::Text(text.clone()));
    }
    parts.extend(calls.iter().cloned().map(Part::Call));
    Ok(Reply {
        text,
        calls,
        usage,
        stop: stop.map(str::to_owned),
        refusal,
        message: Message {
            role: Role::Assistant,
            parts,
            native: None,
        },
    })
}

fn short(v: &Value) -> String {
    v.to_string().chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{chat, is_png, messages, tools};
    use super::*;

    #[test]
    fn requests_carry_system_tools_images_and_paired_tool_messages() {
        let m = messages();
        let t = tools();
        let mut c = chat(&m, &t);
        let b = encode(&c, Images::Inline);
        assert_eq!(b["model"], "m1");
        assert_eq!(b["max_tokens"], 300);
        assert_eq!(b["temperature"], 0.5);
        let msgs = b["messages"].as_array().unwrap();
        let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(msgs[0]["content"], "SYSTEM PROMPT");
        assert_eq!(msgs[2]["content"], "I click OK.");
        assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_1");
        assert_eq!(msgs[2]["tool_calls"][0]["function"]["name"], "click");
        let args: Value = serde_json::from_str(
            msgs[2]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(args, json!({"target": {"element": 4}}));
        assert_eq!(
            msgs[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "executed"})
        );
        let url = msgs[4]["content"][1]["image_url"]["url"].as_str().unwrap();
        assert!(is_png(url.strip_prefix("data:image/png;base64,").unwrap()));
        let click = b["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == "click")
            .unwrap();
        assert_eq!(click["type"], "function");
        assert_eq!(
            click["function"]["parameters"]["required"],
            json!(["target"])
        );
        c.openai_official = true;
        c.tools = &[];
        let b = encode(&c, Images::Inline);
        assert_eq!(b["max_completion_tokens"], 300);
        assert!(b.get("tools").is_none() && b.get("max_tokens").is_none());
    }

    #[test]
    fn responses_give_calls_text_and_usage() {
        let body = json!({
            "choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Saving.", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "hotkey", "arguments": "{\"keys\": [\"ctrl\", \"s\"]}"}},
                {"type": "function", "function": {"name": "click", "arguments": "{not json"}}
            ]}}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 34, "total_tokens": 1234}
        });
        let r = decode(&body).unwrap();
        assert_eq!(r.text, "Saving.");
        assert_eq!(
            r.calls[0],
            ToolCall {
                id: "call_a".into(),
                name: "hotkey".into(),
                args: json!({"keys": ["ctrl", "s"]})
            }
        );
        assert_eq!(
            r.calls[1].id, "call_1",
            "an id is made up when the server gives none"
        );
        assert_eq!(
            r.calls[1].args,
            json!("{not json"),
            "bad JSON is kept for the agent to report"
        );
        assert_eq!(
            r.usage,
            Usage {
                prompt: 1200,
                completion: 34
            }
        );
        assert_eq!(r.stop.as_deref(), Some("tool_calls"));
        assert_eq!(r.message.parts.len(), 3);
        // Ollama sends arguments as an object and no usage.
        let r = decode(&json!({"choices": [{"message": {"content": null, "tool_calls": [{"function": {"name": "complete", "arguments": {}}}]}}]})).unwrap();
        assert_eq!(
            (r.calls[0].name.as_str(), r.usage),
            ("complete", Usage::default())
        );
        assert!(
            decode(&json!({"object": "error"}))
                .unwrap_err()
                .0
                .contains("no choices")
        );
        assert_eq!(r.refusal, None);
    }

    #[test]
    fn refusals_and_filtered_replies_are_refusals() {
        // As ChatCompletionMessage has it (openai-python): `refusal` a string, `content` null.
        let refused = decode(&json!({
            "id": "chatcmpl-9nYAG9LPNonX8DAyrkwYfemr3C8HC", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "refusal": "I'm sorry, I cannot assist with that request."},
                "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 81, "completion_tokens": 11, "total_tokens": 92}
        }))
        .unwrap();
        assert_eq!(
            refused.refusal.map(|r| r.to_string()).as_deref(),
            Some("I'm sorry, I cannot assist with that request.")
        );
        assert_eq!((refused.text.as_str(), refused.usage.completion), ("", 11));
        let filtered = decode(&json!({"choices": [{"index": 0,
            "message": {"role": "assistant", "content": null}, "finish_reason": "content_filter"}]}))
        .unwrap();
        assert_eq!(
            filtered.refusal.map(|r| r.to_string()).as_deref(),
            Some("the provider's content filter withheld the reply (finish_reason content_filter)")
        );
        let null = decode(&json!({"choices": [{"message": {"content": "Done.", "refusal": null}, "finish_reason": "stop"}]})).unwrap();
        assert_eq!(null.refusal, None, "a null refusal is none");
    }
}
