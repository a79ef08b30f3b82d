//! LLM agents against a local HTTP stand-in for the paid model APIs: a small HTTP/1.1
//! server on 127.0.0.1 that speaks the OpenAI, Anthropic and Gemini wire formats with
//! scripted replies and records every request. First the agents alone on a made-up
//! observation (wire formats, images, keys, retries, timeouts, the three structures), then
//! the real runner on real local desktops with a zenity dialog that writes a file, and the
//! `pincer run` CLI reading its key from the environment.

use base64::Engine as _;
use pincer::agent::correction::{Correction, Feedback};
use pincer::agent::llm::{self, Provider, Settings};
use pincer::agent::som::{self, Element};
use pincer::agent::{
    Agent, AgentAction, Exchange, Observation, ObservationConfig, Target, TaskBrief, View, actions,
};
use pincer::metrics::Termination;
use pincer::run::launch::RunOptions;
use pincer::run::sets::EnvSet;
use pincer::run::{AgentFactory, RunConfig};
use pincer::rundir::record::{self, StepRecord, TaskRecord};
use pincer::task::Task;
use pincer_shared::Platform;
use pincer_shared::observe::Rect;
use pincer_tests::{Sandbox, bin};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The key the agents are given; it must never be written anywhere.
const KEY: &str = "sk-stand-in-SECRET-7f3a9c01";

const PROVIDERS: [Provider; 3] = [Provider::OpenAi, Provider::Anthropic, Provider::Gemini];

// ---------------------------------------------------------------------------------------
// The stand-in
// ---------------------------------------------------------------------------------------

/// One request the stand-in received.
#[derive(Debug, Clone)]
struct Recorded {
    path: String,
    /// Header names in lower case.
    headers: BTreeMap<String, String>,
    body: Value,
}

/// One scripted answer.
#[derive(Debug, Clone)]
struct Scripted {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Value,
    /// The tokens this reply reports, as the test counts them.
    usage: (u64, u64),
    /// How long to wait before answering.
    delay: Duration,
}

type Script = Box<dyn FnMut(&Recorded) -> Scripted + Send>;

struct Shared {
    script: Script,
    requests: Vec<Recorded>,
    /// Usage of the successful replies sent.
    served: (u64, u64),
}

/// A local stand-in for the paid model APIs.
struct StandIn {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl StandIn {
    async fn start(script: Script) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the stand-in");
        let addr = listener.local_addr().expect("stand-in address");
        let shared = Arc::new(Mutex::new(Shared {
            script,
            requests: Vec::new(),
            served: (0, 0),
        }));
        let s = shared.clone();
        let server = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, s.clone()));
            }
        });
        Self {
            addr,
            shared,
            server,
        }
    }

    /// A stand-in answering with these replies in order.
    async fn replying(replies: Vec<Scripted>) -> Self {
        let mut queue: VecDeque<Scripted> = replies.into();
        Self::start(Box::new(move |_| {
            queue
                .pop_front()
                .unwrap_or_else(|| error(400, "the stand-in's script ran out"))
        }))
        .await
    }

    fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().unwrap().requests.clone()
    }

    fn served(&self) -> (u64, u64) {
        self.shared.lock().unwrap().served
    }

    fn base_url(&self, p: Provider) -> String {
        match p {
            Provider::OpenAi => format!("http://{}/v1", self.addr),
            Provider::Anthropic => format!("http://{}", self.addr),
            _ => format!("http://{}/v1beta", self.addr),
        }
    }

    /// Agent settings pointing at the stand-in, with the key given.
    fn settings(&self, p: Provider, opts: &[&str]) -> Settings {
        let mut all = vec![format!("base_url={}", self.base_url(p))];
        all.extend(opts.iter().map(|s| (*s).to_owned()));
        Settings::parse(&format!("{p}:stand-in-model"), &all)
            .expect("settings")
            .with_api_key(KEY)
    }
}

/// Serves one HTTP/1.1 request and closes the connection.
async fn serve(mut sock: tokio::net::TcpStream, shared: Arc<Mutex<Shared>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return;
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_owned();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if len > 256 << 20 {
        return;
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let rec = Recorded {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let reply = {
        let mut s = shared.lock().unwrap();
        let reply = (s.script)(&rec);
        s.requests.push(rec);
        if reply.status == 200 {
            s.served.0 += reply.usage.0;
            s.served.1 += reply.usage.1;
        }
        reply
    };
    tokio::time::sleep(reply.delay).await;
    let body = reply.body.to_string();
    let mut out = format!(
        "HTTP/1.1 {} Stand-in\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        reply.status,
        body.len()
    );
    for (k, v) in &reply.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    let _ = sock.write_all(out.as_bytes()).await;
    let _ = sock.shutdown().await;
}

/// An error answer in the shape all three APIs use.
fn error(status: u16, message: &str) -> Scripted {
    Scripted {
        status,
        headers: Vec::new(),
        body: json!({"error": {"message": message, "type": "stand_in_error"}}),
        usage: (0, 0),
        delay: Duration::ZERO,
    }
}

/// Gemini's quota 429 in the shape the Gemini API sends it (recorded in
/// RooCodeInc/Roo-Code#3883: `QuotaFailure`, `Help` and `RetryInfo` details), asking for
/// the stand-in's own `retryDelay`.
fn gemini_quota(retry_delay: &str) -> Scripted {
    Scripted {
        status: 429,
        headers: Vec::new(),
        body: json!({"error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count",
                    "quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier",
                    "quotaDimensions": {"location": "global", "model": "stand-in-model"},
                    "quotaValue": "250000"
                }]},
                {"@type": "type.googleapis.com/google.rpc.Help", "links": [{
                    "description": "Learn more about Gemini API quotas",
                    "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
                }]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
            ]
        }}),
        usage: (0, 0),
        delay: Duration::ZERO,
    }
}

/// A successful reply of provider `p` with this text, tool calls and usage.
fn reply(p: Provider, text: &str, calls: &[(&str, Value)], usage: (u64, u64)) -> Scripted {
    let body = match p {
        Provider::OpenAi => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (n, a))| json!({"id": format!("call_{i}"), "type": "function", "function": {"name": n, "arguments": a.to_string()}}))
                .collect();
            let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if !tool_calls.is_empty() {
                message["tool_calls"] = json!(tool_calls);
            }
            json!({
                "id": "chatcmpl-standin", "object": "chat.completion", "model": "stand-in-model",
                "choices": [{"index": 0, "message": message, "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
                "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
            })
        }
        Provider::Anthropic => {
            let mut content = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (i, (n, a)) in calls.iter().enumerate() {
                content.push(
                    json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": n, "input": a}),
                );
            }
            json!({
                "id": "msg_standin", "type": "message", "role": "assistant", "model": "stand-in-model", "content": content,
                "stop_reason": if calls.is_empty() { "end_turn" } else { "tool_use" },
                "usage": {"input_tokens": usage.0, "output_tokens": usage.1}
            })
        }
        _ => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"text": text}));
            }
            for (n, a) in calls {
                parts.push(json!({"functionCall": {"name": n, "args": a}}));
            }
            json!({
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": usage.0, "candidatesTokenCount": usage.1, "totalTokenCount": usage.0 + usage.1}
            })
        }
    };
    Scripted {
        status: 200,
        headers: Vec::new(),
        body,
        usage,
        delay: Duration::ZERO,
    }
}

fn call(p: Provider, name: &str, args: Value, usage: (u64, u64)) -> Scripted {
    reply(p, "", &[(name, args)], usage)
}

/// A refusal of provider `p` as its API sends one, and what the agent should make of it.
/// OpenAI: `message.refusal` with `content` null (openai-python `ChatCompletionMessage`).
/// Anthropic: `stop_reason` "refusal" with `stop_details` and the text before the cut (the
/// body in Anthropic's "Handle streaming refusals"). Gemini: a blocked prompt, no candidates
/// and `promptFeedback.blockReason` (google-genai `GenerateContentResponse`).
fn refusal(p: Provider, usage: (u64, u64)) -> (Scripted, &'static str) {
    let (body, said) = match p {
        Provider::OpenAi => (
            json!({
                "id": "chatcmpl-standin", "object": "chat.completion", "model": "stand-in-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                    "refusal": "I'm sorry, I cannot assist with that request."},
                    "logprobs": null, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
            }),
            "the model refused: I'm sorry, I cannot assist with that request.",
        ),
        Provider::Anthropic => (
            json!({
                "id": "msg_standin", "type": "message", "role": "assistant", "model": "stand-in-model",
                "content": [{"type": "text", "text": "Hello.."}],
                "stop_reason": "refusal",
                "stop_details": {"type": "refusal", "category": "cyber",
                    "explanation": "This request was declined because it could enable cyber harm."},
                "usage": {"input_tokens": usage.0, "output_tokens": usage.1}
            }),
            "the model refused: This request was declined because it could enable cyber harm. (stop_reason refusal, category cyber)",
        ),
        _ => (
            json!({
                "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                "usageMetadata": {"promptTokenCount": usage.0, "candidatesTokenCount": usage.1, "totalTokenCount": usage.0 + usage.1},
                "modelVersion": "stand-in-model"
            }),
            "the model refused: Gemini blocked the prompt (promptFeedback.blockReason PROHIBITED_CONTENT)",
        ),
    };
    let scripted = Scripted {
        status: 200,
        headers: Vec::new(),
        body,
        usage,
        delay: Duration::ZERO,
    };
    (scripted, said)
}

/// The roles of a request's messages, in order.
fn roles_sent(p: Provider, body: &Value) -> Vec<String> {
    let msgs = match p {
        Provider::Gemini => &body["contents"],
        _ => &body["messages"],
    };
    msgs.as_array()
        .into_iter()
        .flatten()
        .map(|m| m["role"].as_str().unwrap_or_default().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Reading requests
// ---------------------------------------------------------------------------------------

fn system_prompt(p: Provider, body: &Value) -> String {
    let v = match p {
        Provider::OpenAi => &body["messages"][0]["content"],
        Provider::Anthropic => &body["system"],
        _ => &body["system_instruction"]["parts"][0]["text"],
    };
    v.as_str().unwrap_or_default().to_owned()
}

fn tool_names(p: Provider, body: &Value) -> Vec<String> {
    let tools = match p {
        Provider::Gemini => &body["tools"][0]["function_declarations"],
        _ => &body["tools"],
    };
    tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t["function"]["name"]
                .as_str()
                .or(t["name"].as_str())
                .map(str::to_owned)
        })
        .collect()
}

/// Every string in a JSON value.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// All text of a request, joined.
fn text_of(body: &Value) -> String {
    let mut s = Vec::new();
    strings(body, &mut s);
    s.join("\n")
}

/// The images a request carries, decoded.
fn images(p: Provider, body: &Value) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    let b64 = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .expect("image data is base64")
    };
    let mut walk = |v: &Value| {
        for item in v.as_array().into_iter().flatten() {
            match p {
                Provider::OpenAi => {
                    if let Some(url) = item["image_url"]["url"].as_str() {
                        found.push(b64(url
                            .strip_prefix("data:image/png;base64,")
                            .expect("a PNG data URL")));
                    }
                }
                Provider::Anthropic => {
                    if item["type"] == "image" {
                        assert_eq!(item["source"]["media_type"], "image/png");
                        found.push(b64(item["source"]["data"].as_str().expect("image data")));
                    }
                }
                _ => {
                    if let Some(d) = item["inline_data"]["data"].as_str() {
                        assert_eq!(item["inline_data"]["mime_type"], "image/png");
                        found.push(b64(d));
                    }
                }
            }
        }
    };
    let msgs = match p {
        Provider::Gemini => &body["contents"],
        _ => &body["messages"],
    };
    for m in msgs.as_array().into_iter().flatten() {
        match p {
            Provider::Gemini => walk(&m["parts"]),
            _ => walk(&m["content"]),
        }
    }
    found
}

/// The width and height of a PNG, checking its signature.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes([png[i], png[i + 1], png[i + 2], png[i + 3]]);
    (be(16), be(20))
}

/// The number of the first listed element whose line contains `what` (`[N] role "name"`).
fn element(body: &Value, what: &str) -> Option<u32> {
    text_of(body)
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(what))
        .find_map(|l| l[1..].split(']').next()?.parse().ok())
}

// ---------------------------------------------------------------------------------------
// Agents alone, on a made-up observation
// ---------------------------------------------------------------------------------------

fn roles(names: &[&str]) -> BTreeMap<String, Platform> {
    names
        .iter()
        .map(|r| ((*r).to_owned(), Platform::Linux))
        .collect()
}

fn brief(roles: BTreeMap<String, Platform>) -> TaskBrief {
    TaskBrief {
        id: "standin".into(),
        instruction: "Press the OK button of the dialog".into(),
        tools: actions::tools(&roles),
        roles,
        env_names: BTreeMap::new(),
        oracle: None,
        max_steps: 10,
    }
}

/// A 64x48 view with two marked elements named after the role.
fn view(role: &str) -> View {
    let png = som::png(&vec![90u8; 64 * 48 * 3], 64, 48).expect("png");
    let el = |id: u32, name: String| Element {
        id,
        role: "push button".into(),
        name,
        text: None,
        states: vec![],
        bounds: Rect::new(10 * id as i32, 10, 8, 8),
    };
    View {
        role: role.into(),
        platform: Platform::Linux,
        screen: (64, 48),
        image_size: (64, 48),
        screenshot: None,
        marked: Some(png),
        elements: vec![
            el(1, format!("Cancel on {role}")),
            el(2, format!("OK on {role}")),
        ],
        tree: None,
        tree_text: None,
        video: Vec::new(),
        build_ms: 0.0,
    }
}

fn observation(step: u32, views: Vec<View>, feedback: &[&str]) -> Observation {
    Observation {
        step,
        views,
        feedback: feedback.iter().map(|s| (*s).to_owned()).collect(),
        checkpoints: vec![],
        checkpoint_feedback: Default::default(),
    }
}

/// A click on element `element` of environment `env`.
fn click_element(env: &str, element: u32) -> AgentAction {
    AgentAction::Click {
        env: env.into(),
        target: Target::Element { element },
    }
}

/// Which model roles made these exchanges, in order.
fn who(exchanges: &[Exchange]) -> Vec<&str> {
    exchanges.iter().map(|e| e.who.as_str()).collect()
}

/// Step `step` of a one-desktop task: the desktop's view, no feedback.
fn on_desktop(step: u32) -> Observation {
    observation(step, vec![view("desktop")], &[])
}

fn agent(settings: &Settings, brief: &TaskBrief) -> Box<dyn Agent> {
    let mut a = llm::build(settings, 0).expect("build the agent");
    a.begin(brief).expect("begin");
    a
}

/// A stand-in answering with `replies` in order, and an agent of provider `p` on a
/// one-desktop task talking to it with `opts`.
async fn desktop_agent(
    p: Provider,
    opts: &[&str],
    replies: Vec<Scripted>,
) -> (StandIn, Box<dyn Agent>) {
    let standin = StandIn::replying(replies).await;
    let a = agent(&standin.settings(p, opts), &brief(roles(&["desktop"])));
    (standin, a)
}

#[tokio::test]
async fn each_provider_gets_the_system_prompt_tools_and_the_marked_png() {
    for p in PROVIDERS {
        let (standin, mut a) = desktop_agent(
            p,
            &[],
            vec![
                reply(
                    p,
                    "The OK button is element 2.",
                    &[("click", json!({"target": {"element": 2}}))],
                    (1000, 20),
                ),
                call(p, "complete", json!({}), (1100, 5)),
            ],
        )
        .await;
        assert_eq!(a.name(), format!("{p}:stand-in-model"));
        let d = a.act(&on_desktop(0)).await.expect("first decision");
        assert_eq!(d.actions, vec![click_element("desktop", 2)], "{p}");
        assert_eq!(d.invalid, None);
        assert_eq!(d.thought.as_deref(), Some("The OK button is element 2."));
        assert_eq!((d.usage.prompt, d.usage.completion), (1000, 20));
        let d2 = a.act(&on_desktop(1)).await.expect("second decision");
        assert_eq!(d2.actions, vec![AgentAction::Complete]);

        let reqs = standin.requests();
        assert_eq!(reqs.len(), 2);
        let r = &reqs[0];
        let (path, auth) = match p {
            Provider::OpenAi => (
                "/v1/chat/completions",
                ("authorization", format!("Bearer {KEY}")),
            ),
            Provider::Anthropic => ("/v1/messages", ("x-api-key", KEY.to_owned())),
            _ => (
                "/v1beta/models/stand-in-model:generateContent",
                ("x-goog-api-key", KEY.to_owned()),
            ),
        };
        assert_eq!(r.path, path, "{p}");
        assert_eq!(
            r.headers.get(auth.0),
            Some(&auth.1),
            "{p}: the key goes in {}",
            auth.0
        );
        if p == Provider::Anthropic {
            assert_eq!(
                r.headers.get("anthropic-version").map(String::as_str),
                Some("2026-10-21")
            );
            assert!(
                r.body.get("temperature").is_none(),
                "2026-10-21 refuses any temperature"
            );
        }
        let sys = system_prompt(p, &r.body);
        for want in [
            "Task: Press the OK button of the dialog",
            "- desktop: a Linux desktop",
            "`complete`",
            "`submit`",
            "`infeasible`",
            "{\"element\": 4}",
        ] {
            assert!(
                sys.contains(want),
                "{p}: the system prompt lacks {want:?}:\n{sys}"
            );
        }
        let tools = tool_names(p, &r.body);
        for want in [
            "click",
            "type",
            "key",
            "hotkey",
            "scroll",
            "drag",
            "wait",
            "complete",
            "submit",
            "infeasible",
        ] {
            assert!(
                tools.iter().any(|t| t == want),
                "{p}: no {want} tool in {tools:?}"
            );
        }
        let text = text_of(&r.body);
        assert!(
            text.contains("[2] push button \"OK on desktop\""),
            "{p}: the element list is sent"
        );
        let imgs = images(p, &r.body);
        assert_eq!(imgs.len(), 1, "{p}: one marked screenshot");
        assert_eq!(png_size(&imgs[0]), (64, 48), "{p}");
        assert_eq!(
            imgs[0],
            view("desktop").marked.unwrap(),
            "{p}: the marked PNG itself"
        );

        // The second request answers the call and keeps only the new image.
        let second = &reqs[1].body;
        assert_eq!(
            images(p, second).len(),
            1,
            "{p}: the older image is dropped"
        );
        let t2 = text_of(second);
        assert!(
            t2.contains("(screenshot step-001-desktop-marks.png omitted)"),
            "{p}"
        );
        assert!(
            t2.contains("executed; the next observation shows the effect"),
            "{p}: the tool result is sent"
        );

        // What is stored: images by reference, no key, the response as received.
        let stored = serde_json::to_string(&d.exchanges).unwrap();
        assert_eq!(d.exchanges.len(), 1);
        assert_eq!(d.exchanges[0].who, "agent");
        assert!(
            stored.contains("<image step-001-desktop-marks.png>"),
            "{p}: {stored}"
        );
        assert!(!stored.contains(KEY), "{p}: the key is stored");
        let b64 = base64::engine::general_purpose::STANDARD.encode(view("desktop").marked.unwrap());
        assert!(
            !stored.contains(&b64),
            "{p}: the image is inlined in the stored exchange"
        );
        let resp = &d.exchanges[0].response;
        assert!(
            resp.get("usage").or(resp.get("usageMetadata")).is_some(),
            "{p}: the response is stored as received: {resp}"
        );
    }
}

#[tokio::test]
async fn the_anthropic_version_can_be_the_old_one_that_takes_a_temperature() {
    let p = Provider::Anthropic;
    let (standin, mut a) = desktop_agent(
        p,
        &["api_version=2023-06-01", "temperature=0.3"],
        vec![call(p, "complete", json!({}), (1, 1))],
    )
    .await;
    a.act(&on_desktop(0)).await.expect("a decision");
    let r = &standin.requests()[0];
    assert_eq!(
        r.headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert_eq!(r.body["temperature"], 0.3);
}

#[tokio::test]
async fn json_mode_sends_no_tools_and_reads_the_action_from_text() {
    for p in PROVIDERS {
        let (standin, mut a) = desktop_agent(
            p,
            &["mode=json"],
            vec![reply(
                p,
                "I will press OK.\n{\"action\": \"click\", \"target\": {\"element\": 2}}",
                &[],
                (10, 10),
            )],
        )
        .await;
        let d = a.act(&on_desktop(0)).await.unwrap();
        assert_eq!(d.actions.len(), 1, "{p}: {d:?}");
        let r = &standin.requests()[0];
        assert!(
            tool_names(p, &r.body).is_empty(),
            "{p}: no tools in JSON mode"
        );
        let sys = system_prompt(p, &r.body);
        assert!(
            sys.contains("- \"click\": Left-click") && sys.contains("reply with a JSON object"),
            "{p}: {sys}"
        );
    }
}

#[tokio::test]
async fn a_refusal_is_reported_as_one_and_its_turn_taken_back() {
    for p in PROVIDERS {
        let (refused, said) = refusal(p, (50, 4));
        let (standin, mut a) = desktop_agent(
            p,
            &[],
            vec![
                refused,
                call(p, "click", json!({"target": {"element": 2}}), (60, 5)),
            ],
        )
        .await;
        let d = a.act(&on_desktop(0)).await.expect("a refusal is an answer");
        assert!(d.actions.is_empty(), "{p}: {d:?}");
        assert_eq!(d.invalid.as_deref(), Some(said), "{p}");
        assert_eq!(
            (d.usage.prompt, d.usage.completion),
            (50, 4),
            "{p}: counted"
        );
        assert_eq!(
            d.exchanges.len(),
            1,
            "{p}: the refusal is in the trajectory"
        );
        let feedback = format!("your last output was not a valid action: {said}");
        let d = a
            .act(&observation(1, vec![view("desktop")], &[&feedback]))
            .await
            .unwrap();
        assert_eq!(d.actions, vec![click_element("desktop", 2)], "{p}");
        let next = &standin.requests()[1].body;
        let first_turn = match p {
            Provider::OpenAi => vec!["system", "user"],
            _ => vec!["user"],
        };
        assert_eq!(
            roles_sent(p, next),
            first_turn,
            "{p}: the refused turn is not sent again"
        );
        assert!(
            text_of(next).contains(&feedback),
            "{p}: but the model hears of it"
        );
    }
}

#[tokio::test]
async fn a_refusing_planner_or_main_agent_is_named_and_nothing_is_handed_on() {
    let p = Provider::OpenAi;
    for (structure, who) in [
        ("structure=planner", "planner"),
        ("structure=per-env", "main agent"),
    ] {
        let (refused, said) = refusal(p, (5, 1));
        let (standin, mut a) = desktop_agent(p, &[structure], vec![refused]).await;
        let d = a.act(&on_desktop(0)).await.expect("a refusal is an answer");
        let want = said.replace("the model", &format!("the {who}"));
        assert_eq!(d.invalid.as_deref(), Some(want.as_str()), "{structure}");
        assert_eq!(
            standin.requests().len(),
            1,
            "{structure}: no sub-goal to hand on"
        );
    }
}

#[tokio::test]
async fn unusable_replies_become_invalid_decisions_with_the_reason() {
    let p = Provider::OpenAi;
    let (standin, mut a) = desktop_agent(
        p,
        &[],
        vec![
            call(p, "fly", json!({"to": "moon"}), (5, 5)),
            reply(p, "I am not sure what to do.", &[], (5, 5)),
            call(p, "click", json!({"target": {"element": 2}}), (5, 5)),
        ],
    )
    .await;
    let d = a.act(&on_desktop(0)).await.unwrap();
    assert!(d.actions.is_empty());
    let why = d.invalid.expect("invalid");
    assert!(
        why.contains("unknown tool 'fly'") && why.contains("click"),
        "{why}"
    );
    let d = a
        .act(&observation(
            1,
            vec![view("desktop")],
            &["your last output was not a valid action: unknown tool 'fly'"],
        ))
        .await
        .unwrap();
    assert!(d.invalid.expect("invalid").contains("called no tool"));
    let d = a.act(&on_desktop(2)).await.unwrap();
    assert_eq!(d.actions.len(), 1);
    let reqs = standin.requests();
    let second = &reqs[1].body["messages"];
    let tool_msg = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the call is answered");
    assert!(
        tool_msg["content"]
            .as_str()
            .unwrap()
            .starts_with("not executed: unknown tool 'fly'")
    );
    assert!(
        text_of(&reqs[1].body)
            .contains("- your last output was not a valid action: unknown tool 'fly'"),
        "the runner's feedback reaches the model"
    );
}

#[tokio::test]
async fn a_429_is_retried_after_the_time_the_server_asks() {
    let p = Provider::Anthropic;
    let mut limited = error(429, "rate limited");
    limited.headers.push(("retry-after", "1".into()));
    let (standin, mut a) = desktop_agent(
        p,
        &[],
        vec![limited, call(p, "complete", json!({}), (7, 3))],
    )
    .await;
    let t = Instant::now();
    let d = a.act(&on_desktop(0)).await.expect("the retry succeeds");
    assert!(
        t.elapsed() >= Duration::from_millis(950),
        "waited {:?}, not the second asked",
        t.elapsed()
    );
    assert_eq!(d.actions, vec![AgentAction::Complete]);
    assert_eq!((d.usage.prompt, d.usage.completion), (7, 3));
    assert_eq!(standin.requests().len(), 2);
    assert_eq!(
        standin.requests()[0].body,
        standin.requests()[1].body,
        "the same request is sent again"
    );
}

#[tokio::test]
async fn a_gemini_quota_429_is_retried_after_the_delay_in_its_body() {
    let p = Provider::Gemini;
    let (standin, mut a) = desktop_agent(
        p,
        &[],
        vec![gemini_quota("1.5s"), call(p, "complete", json!({}), (7, 3))],
    )
    .await;
    let t = Instant::now();
    let d = a.act(&on_desktop(0)).await.expect("the retry succeeds");
    assert!(
        t.elapsed() >= Duration::from_millis(1450),
        "waited {:?}, not the 1.5 s asked (the first backoff is 1 to 1.25 s)",
        t.elapsed()
    );
    assert_eq!(d.actions, vec![AgentAction::Complete]);
    assert_eq!(standin.requests().len(), 2);
}

#[tokio::test]
async fn a_wait_longer_than_pincer_allows_fails_at_once_saying_how_long() {
    let mut limited = error(429, "Rate limit reached for requests");
    limited.headers.push(("retry-after", "600".into()));
    for (p, answer, asked) in [
        (Provider::Gemini, gemini_quota("3600s"), "3600 s"),
        (Provider::OpenAi, limited, "600 s"),
    ] {
        let (standin, mut a) = desktop_agent(p, &[], vec![answer]).await;
        let t = Instant::now();
        let msg = a
            .act(&on_desktop(0))
            .await
            .expect_err("no sleeping that long")
            .to_string();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "{p}: slept {:?}",
            t.elapsed()
        );
        assert!(
            msg.contains(&format!("asked to wait {asked} before the next attempt"))
                && msg.contains("429 Too Many Requests")
                && msg.contains(if p == Provider::Gemini {
                    "exceeded your current quota"
                } else {
                    "Rate limit reached"
                }),
            "{p}: {msg}"
        );
        assert_eq!(standin.requests().len(), 1, "{p}: not retried");
    }
}

#[tokio::test]
async fn three_server_errors_give_an_agent_error_that_says_what_happened() {
    let p = Provider::Gemini;
    let (standin, mut a) = desktop_agent(
        p,
        &["retries=2"],
        vec![
            error(500, "the stand-in is down"),
            error(502, "the stand-in is down"),
            error(500, "the stand-in is down"),
        ],
    )
    .await;
    let e = a.act(&on_desktop(0)).await.expect_err("the API stays down");
    let msg = e.to_string();
    assert!(
        msg.contains("gemini API")
            && msg.contains("failed 3 times")
            && msg.contains("500")
            && msg.contains("the stand-in is down"),
        "{msg}"
    );
    assert!(
        msg.contains(&standin.addr.to_string()),
        "the endpoint is named: {msg}"
    );
    assert!(!msg.contains(KEY));
    assert_eq!(standin.requests().len(), 3);
}

#[tokio::test]
async fn a_refused_key_is_not_retried_and_not_repeated() {
    let p = Provider::OpenAi;
    let (standin, mut a) = desktop_agent(
        p,
        &[],
        vec![error(401, &format!("Incorrect API key provided: {KEY}"))],
    )
    .await;
    let msg = a
        .act(&on_desktop(0))
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        msg.contains("401") && msg.contains("check the API key") && msg.contains("<redacted>"),
        "{msg}"
    );
    assert!(
        !msg.contains(KEY),
        "the key the server echoed is scrubbed: {msg}"
    );
    assert_eq!(standin.requests().len(), 1, "a 401 is not retried");
}

#[tokio::test]
async fn a_slow_model_times_out() {
    let p = Provider::OpenAi;
    let mut slow = call(p, "complete", json!({}), (1, 1));
    slow.delay = Duration::from_secs(4);
    let (_standin, mut a) = desktop_agent(p, &["timeout_s=1", "retries=0"], vec![slow]).await;
    let t = Instant::now();
    let msg = a
        .act(&on_desktop(0))
        .await
        .expect_err("timed out")
        .to_string();
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert!(
        msg.contains("no answer within 1 s (timeout_s)") && msg.contains("failed 1 time;"),
        "{msg}"
    );
}

#[tokio::test]
async fn the_planner_plans_in_words_then_the_tool_agent_calls_tools() {
    let p = Provider::OpenAi;
    let (standin, mut a) = desktop_agent(
        p,
        &["structure=planner"],
        vec![
            reply(p, "Click element 2, the OK button.", &[], (300, 12)),
            call(p, "click", json!({"target": {"element": 2}}), (200, 8)),
            reply(p, "The task is done: call complete.", &[], (310, 9)),
            call(p, "complete", json!({}), (210, 4)),
        ],
    )
    .await;
    assert_eq!(a.name(), "openai:stand-in-model/planner");
    let d = a.act(&on_desktop(0)).await.unwrap();
    assert_eq!(d.actions, vec![click_element("desktop", 2)]);
    assert_eq!(
        d.thought.as_deref(),
        Some("plan: Click element 2, the OK button.")
    );
    assert_eq!(who(&d.exchanges), ["planner", "tool-agent"]);
    assert_eq!((d.usage.prompt, d.usage.completion), (500, 20));
    let d = a.act(&on_desktop(1)).await.unwrap();
    assert_eq!(d.actions, vec![AgentAction::Complete]);

    let reqs = standin.requests();
    assert_eq!(reqs.len(), 4);
    let (plan, tool) = (&reqs[0].body, &reqs[1].body);
    assert!(tool_names(p, plan).is_empty(), "the planner gets no tools");
    assert_eq!(
        images(p, plan).len(),
        1,
        "the planner sees the marked screenshot"
    );
    assert!(system_prompt(p, plan).contains("planner"));
    assert!(
        tool_names(p, tool).contains(&"click".to_owned()),
        "the tool agent gets the tools"
    );
    assert!(
        images(p, tool).is_empty(),
        "the tool agent reads the element list only"
    );
    assert!(text_of(tool).contains("Next step from the planner: Click element 2, the OK button."));
    assert!(text_of(tool).contains("[2] push button \"OK on desktop\""));
    assert!(
        text_of(&reqs[2].body)
            .contains("What was done for your last step: click element 2 on desktop"),
        "the planner hears what was done"
    );
}

#[tokio::test]
async fn per_env_delegates_to_the_agent_that_sees_only_its_environment() {
    let p = Provider::Anthropic;
    let standin = StandIn::replying(vec![
        call(
            p,
            "delegate",
            json!({"env": "desktop2", "instruction": "Press OK in the dialog"}),
            (400, 30),
        ),
        call(p, "click", json!({"target": {"element": 2}}), (250, 10)),
        call(p, "complete", json!({}), (410, 5)),
    ])
    .await;
    let b = brief(roles(&["desktop", "desktop2"]));
    let mut a = agent(&standin.settings(p, &["structure=per-env"]), &b);
    let views = || vec![view("desktop"), view("desktop2")];
    let d = a.act(&observation(0, views(), &[])).await.unwrap();
    assert_eq!(
        d.actions,
        vec![click_element("desktop2", 2)],
        "the sub-agent's action lands on its environment"
    );
    assert_eq!(who(&d.exchanges), ["main", "desktop2"]);
    assert_eq!(
        d.thought.as_deref(),
        Some("desktop2: Press OK in the dialog")
    );
    assert_eq!((d.usage.prompt, d.usage.completion), (650, 40));
    // Each model call carries its own tokens: the main agent's, then the sub-agent's.
    let per_call: Vec<(u64, u64)> = d
        .exchanges
        .iter()
        .map(|x| (x.usage.prompt, x.usage.completion))
        .collect();
    assert_eq!(per_call, [(400, 30), (250, 10)]);
    let d = a.act(&observation(1, views(), &[])).await.unwrap();
    assert_eq!(d.actions, vec![AgentAction::Complete]);

    let reqs = standin.requests();
    assert_eq!(reqs.len(), 3, "main, desktop2's agent, main");
    let (main, sub) = (&reqs[0].body, &reqs[1].body);
    assert_eq!(
        tool_names(p, main),
        ["delegate", "complete", "submit", "infeasible"]
    );
    assert_eq!(
        main["tools"][0]["input_schema"]["properties"]["env"]["enum"],
        json!(["desktop", "desktop2"])
    );
    let mt = text_of(main);
    assert!(
        mt.contains("OK on desktop\"") && mt.contains("OK on desktop2\""),
        "the main agent sees every element list"
    );
    assert!(
        images(p, main).is_empty(),
        "the main agent gets no screenshots"
    );
    let st = text_of(sub);
    assert!(system_prompt(p, sub).contains("the environment 'desktop2'"));
    assert!(st.contains("Sub-goal from the main agent: Press OK in the dialog"));
    assert!(
        st.contains("OK on desktop2\"") && !st.contains("OK on desktop\""),
        "the sub-agent sees only its own environment"
    );
    assert_eq!(images(p, sub).len(), 1);
    let sub_tools = tool_names(p, sub);
    assert!(
        sub_tools.contains(&"click".to_owned())
            && !sub_tools.contains(&"complete".to_owned())
            && !sub_tools.contains(&"delegate".to_owned())
    );
    assert!(
        sub["tools"][0]["input_schema"]["properties"]
            .get("env")
            .is_none(),
        "one environment: no env argument"
    );
    let back = &reqs[2].body["messages"][2]["content"][0];
    assert_eq!(back["type"], "tool_result");
    assert_eq!(
        back["content"],
        "the desktop2 agent did: click element 2 on desktop2"
    );
}

// ---------------------------------------------------------------------------------------
// The real runner on real desktops
// ---------------------------------------------------------------------------------------

/// A zenity dialog whose answer is written to `~/name.txt`; the task succeeds when it holds
/// "pincer". Teardown closes the dialog through its own display: `pkill zenity` would kill
/// the dialogs of the tests running beside it.
fn zenity_task(id: &str, max_steps: u32) -> Task {
    let title = format!("pincer {id}");
    serde_json::from_value(json!({
        "id": id,
        "instruction": "Type pincer into the dialog's text field and press OK.",
        "envs": {"desktop": {"platform": "linux"}},
        "setup": {"desktop": [
            {"do": "remove", "path": "~/name.txt"},
            {"do": "launch", "argv": ["sh", "-c", format!("zenity --entry --title '{title}' --text 'Your name:' > ~/name.txt")]},
            {"do": "wait_window", "title_contains": title, "timeout_ms": 60000}
        ]},
        "teardown": {"desktop": [{"do": "window", "title_contains": title, "op": "close"}]},
        "checkpoints": [{"id": "written", "env": "desktop", "check": "file_contains", "args": {"path": "~/name.txt", "text": "pincer"}}],
        "limits": {"max_steps": max_steps, "max_seconds": 180}
    }))
    .expect("a valid task")
}

/// What a model that reads the element list does with the zenity task: type into the entry,
/// click OK, wait, declare completion. Waits while the elements are not listed yet.
fn zenity_solver(p: Provider) -> Script {
    let mut phase = 0;
    let mut n = 0u64;
    Box::new(move |r: &Recorded| {
        n += 1;
        let usage = (1000 + n, 10 + n);
        let wait = || call(p, "wait", json!({"seconds": 0.5}), usage);
        match phase {
            0 => match element(&r.body, "] text ") {
                Some(e) => {
                    phase = 1;
                    reply(
                        p,
                        &format!("The entry is element {e}."),
                        &[("type", json!({"text": "pincer", "target": {"element": e}}))],
                        usage,
                    )
                }
                None => wait(),
            },
            1 => match element(&r.body, "push button \"OK\"") {
                Some(e) => {
                    phase = 2;
                    call(p, "click", json!({"target": {"element": e}}), usage)
                }
                None => wait(),
            },
            2 => {
                phase = 3;
                call(p, "wait", json!({"seconds": 1}), usage)
            }
            _ => call(p, "complete", json!({}), usage),
        }
    })
}

/// Runs the zenity task `id` (see [`zenity_task`]) through `pincer::run::run` on a new
/// desktop of that name, writing to `run/` in the sandbox; returns its record, steps and
/// trajectory directory.
async fn run_zenity(
    sb: &Sandbox,
    id: &str,
    max_steps: u32,
    settings: Settings,
) -> (TaskRecord, Vec<StepRecord>, PathBuf) {
    run_zenity_with(sb, id, max_steps, settings, Correction::default()).await
}

/// [`run_zenity`] with feedback and attempts.
async fn run_zenity_with(
    sb: &Sandbox,
    id: &str,
    max_steps: u32,
    settings: Settings,
    correction: Correction,
) -> (TaskRecord, Vec<StepRecord>, PathBuf) {
    let desktop = sb.desktop(id, "800x600", &[]);
    let task = zenity_task(id, max_steps);
    let out = sb.path().join("run");
    let env = desktop.connect().await;
    let set = EnvSet {
        name: "s0".into(),
        envs: [("desktop".to_owned(), Arc::new(env))].into(),
        platforms: roles(&["desktop"]),
        vms: Default::default(),
    };
    let agent: AgentFactory = Arc::new(move |seed| llm::build(&settings, seed));
    let records = pincer::run::run(RunConfig {
        tasks: vec![task],
        agent,
        agent_name: "stand-in".into(),
        sets: vec![set],
        options: RunOptions {
            correction,
            ..RunOptions::new(out.clone(), ObservationConfig::default())
        },
        cancel: Arc::new(AtomicBool::new(false)),
    })
    .await
    .expect("the run finishes");
    let rec = records.into_iter().next().expect("one record");
    let traj = out.join(&rec.trajectory);
    let steps = record::read_steps(&traj).expect("steps.jsonl");
    (rec, steps, traj)
}

/// Fails, telling the run's story, unless the run succeeded.
#[track_caller]
fn assert_succeeded(rec: &TaskRecord, steps: &[StepRecord]) {
    assert_eq!(
        rec.termination,
        Termination::Success,
        "{rec:?}\n{}",
        story(steps)
    );
}

/// The actions and their results, step by step, for failure messages.
fn story(steps: &[StepRecord]) -> String {
    steps
        .iter()
        .map(|s| {
            format!(
                "step {}: {:?} -> {:?} {:?}\n{}",
                s.step,
                s.actions,
                s.results,
                s.invalid,
                s.elements
                    .iter()
                    .map(|(_, e)| e.as_str())
                    .collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Fails if any file under `dir` contains the key.
fn assert_no_key_under(dir: &Path) {
    let mut stack = vec![dir.to_owned()];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files += 1;
                let bytes = std::fs::read(&path).expect("read file");
                assert!(
                    !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                    "{} holds the API key",
                    path.display()
                );
            }
        }
    }
    assert!(
        files >= 3,
        "results, run.json and a trajectory were written"
    );
}

// ---------------------------------------------------------------------------------------
// Self-correction: feedback and attempts
// ---------------------------------------------------------------------------------------

/// What attempt 2 of 2 is told first when attempt 1 ended with the agent saying it was done.
const TOLD_FAILED: &str = "attempt 1 of 2 failed (false-completion)";

/// What feedback on the zenity task's checkpoint says before the file is written.
const NOT_WRITTEN: &str = "checkpoint 'written' did not pass: ";

/// A model that says it is done at once until it is told how the attempt failed (the
/// checkpoint's feedback), then solves the task as [`zenity_solver`] does.
fn learner(p: Provider) -> Script {
    let mut solver = zenity_solver(p);
    let mut told = false;
    Box::new(move |r: &Recorded| {
        let text = text_of(&r.body);
        told |= text.contains(TOLD_FAILED) && text.contains(NOT_WRITTEN);
        if told {
            solver(r)
        } else {
            call(p, "complete", json!({}), (100, 5))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_retried_with_the_checkpoint_feedback_and_reports_count_success_by_attempt()
 {
    let p = Provider::OpenAi;
    let sb = Sandbox::new();
    let d = sb.desktop("retry-end", "800x600", &[]);
    let standin = StandIn::start(learner(p)).await;
    let file = write_task(&sb, &zenity_task("retry-end", 8));
    let run = sb.path().join("run");
    let mut cmd = pincer_run(&sb, &file, "openai:stand-in-model", &d.name);
    cmd.args(["--agent-opt", &format!("base_url={}", standin.base_url(p))])
        .args(["--feedback", "end", "--attempts", "2", "--out"])
        .arg(&run);
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("run pincer");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("success by attempt: 1: 0.0%, 2: 100.0%"),
        "{stdout}"
    );
    let rec = record::read_results(&run.join("results.jsonl"))
        .unwrap()
        .remove(0);
    let steps = record::read_steps(&run.join(&rec.trajectory)).unwrap();
    assert_succeeded(&rec, &steps);
    assert_eq!(rec.attempt(), 2, "{rec:?}");
    let first = &rec.retried[0];
    assert_eq!(first.termination, Termination::FalseCompletion);
    assert_eq!(first.actions, 1, "one action: complete");
    assert!(first.told[0].starts_with(TOLD_FAILED), "{:?}", first.told);
    assert!(
        first
            .told
            .iter()
            .any(|t| t.starts_with(NOT_WRITTEN) && t.contains("name.txt")),
        "the checkpoint's feedback names what it saw: {:?}",
        first.told
    );
    // Each attempt has its own trajectory; the record is the last one's.
    assert_eq!(first.trajectory, "tasks/retry-end__r0");
    assert_eq!(rec.trajectory, "tasks/retry-end__r0__a2");
    assert_eq!(
        record::read_steps(&run.join(&first.trajectory))
            .unwrap()
            .len(),
        1
    );
    // Costs are every attempt's.
    assert_eq!(rec.outcome().actions, rec.actions + 1);
    // The first attempt was never given feedback during its steps (end, not step).
    let requests = standin.requests();
    assert!(
        !text_of(&requests[0].body).contains("checkpoint"),
        "no step feedback with --feedback end"
    );
    // The header says how the run was made; the reports count success by attempt.
    let header: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        header["correction"],
        json!({"feedback": "end", "attempts": 2})
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(md.contains("## Success by attempt"), "{md}");
    assert!(md.contains("| 1 | 0 | 0.0% |"), "{md}");
    assert!(md.contains("| 2 | 1 | 100.0% |"), "{md}");
    assert!(md.contains("feedback end, up to 2 attempts"), "{md}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("attempt 1 of 2: false-completion after 1 actions"));
    // Resuming with other attempts is another run.
    let mut again = pincer_run(&sb, &file, "openai:stand-in-model", &d.name);
    again
        .args(["--agent-opt", &format!("base_url={}", standin.base_url(p))])
        .args(["--feedback", "end", "--attempts", "3", "--resume", "--out"])
        .arg(&run);
    let out = again.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--feedback end --attempts 2 (here: --feedback end --attempts 3)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_feedback_a_retry_is_told_only_that_the_attempt_failed() {
    let p = Provider::OpenAi;
    let sb = Sandbox::new();
    let standin = StandIn::start(learner(p)).await;
    let correction = Correction::new(Feedback::None, 2).unwrap();
    let (rec, _, _) =
        run_zenity_with(&sb, "retry-none", 8, standin.settings(p, &[]), correction).await;
    // Never told what the checkpoint saw, the learner never learns.
    assert_eq!(rec.termination, Termination::FalseCompletion);
    assert_eq!(rec.attempt(), 2);
    assert_eq!(rec.retried[0].told.len(), 1, "{:?}", rec.retried[0].told);
    assert!(rec.retried[0].told[0].starts_with(TOLD_FAILED));
    let requests = standin.requests();
    assert_eq!(requests.len(), 2, "one decision per attempt");
    assert!(text_of(&requests[1].body).contains(TOLD_FAILED));
    assert!(!text_of(&requests[1].body).contains("checkpoint"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_feedback_tells_the_agent_what_each_checkpoint_sees_as_it_works() {
    let p = Provider::OpenAi;
    let sb = Sandbox::new();
    let standin = StandIn::start(zenity_solver(p)).await;
    let correction = Correction::new(Feedback::Step, 1).unwrap();
    let (rec, steps, _) = run_zenity_with(
        &sb,
        "feedback-step",
        8,
        standin.settings(p, &[]),
        correction,
    )
    .await;
    assert_succeeded(&rec, &steps);
    let texts: Vec<String> = standin
        .requests()
        .iter()
        .map(|r| text_of(&r.body))
        .collect();
    assert!(
        texts[0].contains("checkpoints: 0 of 1 passed"),
        "{}",
        texts[0]
    );
    // After the first action the checkpoint was judged, and its feedback is shown.
    assert!(
        texts[1..]
            .iter()
            .any(|t| t.contains("checkpoint 'written' not passed yet: ") && t.contains("name.txt")),
        "{texts:?}"
    );
}

/// Every `<image FILE>` reference of the stored exchanges names a file of the trajectory.
fn assert_references_resolve(steps: &[StepRecord], traj: &Path) -> usize {
    let mut n = 0;
    for s in steps {
        let text = serde_json::to_string(&s.exchanges).unwrap();
        for part in text.split("<image ").skip(1) {
            let name = part.split('>').next().unwrap();
            assert!(
                traj.join(name).is_file(),
                "step {}: {name} is not in the trajectory",
                s.step
            );
            n += 1;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_agent_fills_a_zenity_dialog_through_the_runner() {
    let p = Provider::OpenAi;
    let sb = Sandbox::new();
    let standin = StandIn::start(zenity_solver(p)).await;
    let (rec, steps, traj) = run_zenity(&sb, "llm-openai", 8, standin.settings(p, &[])).await;
    assert_succeeded(&rec, &steps);
    assert_eq!(rec.agent, "openai:stand-in-model");
    assert_eq!((rec.passed, rec.total), (1, 1));
    let reqs = standin.requests();
    assert!(
        reqs.len() >= 2 && reqs.len() == steps.len(),
        "{} requests for {} steps",
        reqs.len(),
        steps.len()
    );

    // The usage of every scripted reply, summed, is the record's.
    let served = standin.served();
    assert_eq!((rec.usage.prompt, rec.usage.completion), served);
    let per_step: u64 = steps.iter().map(|s| s.usage.total()).sum();
    assert_eq!(per_step, served.0 + served.1);

    // The real marked screenshot went out as an 800x600 PNG, with the element list.
    let first = &reqs[0].body;
    let imgs = images(p, first);
    assert_eq!(imgs.len(), 1);
    assert_eq!(png_size(&imgs[0]), (800, 600));
    assert!(system_prompt(p, first).contains("Type pincer into the dialog's text field"));
    assert!(tool_names(p, first).contains(&"type".to_owned()));
    let typed = steps
        .iter()
        .find(|s| s.actions.first().is_some_and(|a| a["action"] == "type"))
        .expect("a type step");
    assert_eq!(typed.results, ["ok"]);
    assert_eq!(typed.images.len(), 1);

    // Stored exchanges point at the trajectory's images; no key anywhere in the run.
    assert!(assert_references_resolve(&steps, &traj) >= steps.len());
    assert_no_key_under(&sb.path().join("run"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_planner_fills_the_dialog_through_the_runner() {
    let p = Provider::Anthropic;
    let sb = Sandbox::new();
    // The planner says what the solver will do; the tool agent does it.
    let mut solver = zenity_solver(p);
    let script: Script = Box::new(move |r: &Recorded| {
        if tool_names(p, &r.body).is_empty() {
            reply(p, "Fill in the name, then press OK.", &[], (50, 5))
        } else {
            solver(r)
        }
    });
    let standin = StandIn::start(script).await;
    let (rec, steps, _) = run_zenity(
        &sb,
        "llm-planner",
        8,
        standin.settings(p, &["structure=planner"]),
    )
    .await;
    assert_succeeded(&rec, &steps);
    assert_eq!(rec.agent, "anthropic:stand-in-model/planner");
    for s in &steps {
        assert_eq!(
            who(&s.exchanges),
            ["planner", "tool-agent"],
            "step {}",
            s.step
        );
        assert_eq!(
            s.thought.as_deref(),
            Some("plan: Fill in the name, then press OK.")
        );
    }
    assert_eq!(standin.requests().len(), 2 * steps.len());
    assert_eq!((rec.usage.prompt, rec.usage.completion), standin.served());
    assert_no_key_under(&sb.path().join("run"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_outputs_are_fed_back_and_three_in_a_row_end_the_run() {
    let p = Provider::Gemini;
    let sb = Sandbox::new();
    let standin = StandIn::replying(vec![
        call(p, "fly", json!({}), (10, 1)),
        call(p, "click", json!({"target": {"element": 999}}), (10, 1)),
        call(p, "teleport", json!({}), (10, 1)),
    ])
    .await;
    let (rec, steps, _) = run_zenity(&sb, "llm-invalid", 10, standin.settings(p, &[])).await;
    assert_eq!(rec.termination, Termination::InvalidAction, "{rec:?}");
    assert!(
        rec.detail
            .as_deref()
            .unwrap_or("")
            .contains("unknown tool 'teleport'"),
        "{:?}",
        rec.detail
    );
    assert_eq!(steps.len(), 3);
    assert!(
        steps[0]
            .invalid
            .as_deref()
            .unwrap_or("")
            .contains("unknown tool 'fly'")
    );
    assert!(steps[0].actions.is_empty());
    assert_eq!(
        steps[1].invalid, None,
        "a bad element is the runner's to find"
    );
    assert!(
        steps[1].results[0].starts_with("invalid: there is no element 999"),
        "{:?}",
        steps[1].results
    );
    let reqs = standin.requests();
    assert!(
        text_of(&reqs[1].body)
            .contains("your last output was not a valid action: unknown tool 'fly'"),
        "fed back"
    );
    assert!(
        text_of(&reqs[2].body)
            .contains("click element 999 on desktop failed: there is no element 999"),
        "fed back"
    );
    assert_eq!((rec.usage.prompt, rec.usage.completion), (30, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_recorded_fed_back_and_end_the_run_like_invalid_outputs() {
    let p = Provider::Anthropic;
    let sb = Sandbox::new();
    let (refused, said) = refusal(p, (10, 1));
    let standin = StandIn::replying(vec![refused.clone(), refused.clone(), refused]).await;
    let (rec, steps, _) = run_zenity(&sb, "llm-refusal", 10, standin.settings(p, &[])).await;
    assert_eq!(rec.termination, Termination::InvalidAction, "{rec:?}");
    assert_eq!(rec.detail.as_deref(), Some(said));
    assert_eq!(steps.len(), 3);
    assert!(
        steps
            .iter()
            .all(|s| s.invalid.as_deref() == Some(said) && s.actions.is_empty())
    );
    assert_eq!(
        steps[0].thought.as_deref(),
        Some("Hello.."),
        "the text before the cut"
    );
    assert_eq!(steps[0].exchanges[0].response["stop_reason"], "refusal");
    assert!(
        text_of(&standin.requests()[1].body)
            .contains(&format!("your last output was not a valid action: {said}")),
        "fed back"
    );
    assert_eq!((rec.usage.prompt, rec.usage.completion), (30, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completing_before_the_checkpoints_pass_is_a_false_completion() {
    let p = Provider::OpenAi;
    let sb = Sandbox::new();
    let standin = StandIn::replying(vec![reply(
        p,
        "Looks done to me.",
        &[("complete", json!({}))],
        (900, 9),
    )])
    .await;
    let (rec, steps, _) = run_zenity(&sb, "llm-false", 10, standin.settings(p, &[])).await;
    assert_eq!(rec.termination, Termination::FalseCompletion, "{rec:?}");
    assert!(
        rec.detail.as_deref().unwrap_or("").contains("0 of 1"),
        "{:?}",
        rec.detail
    );
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].thought.as_deref(), Some("Looks done to me."));
    assert_eq!((rec.usage.prompt, rec.usage.completion), (900, 9));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_limit_ends_a_run_that_goes_nowhere() {
    let p = Provider::Anthropic;
    let sb = Sandbox::new();
    let standin = StandIn::replying(vec![
        call(p, "key", json!({"key": "shift"}), (100, 1)),
        call(p, "key", json!({"key": "shift"}), (100, 1)),
    ])
    .await;
    let (rec, steps, _) = run_zenity(&sb, "llm-limit", 2, standin.settings(p, &[])).await;
    assert_eq!(rec.termination, Termination::StepLimit, "{rec:?}");
    assert_eq!((rec.actions, steps.len()), (2, 2));
    assert_eq!(standin.requests().len(), 2, "no model call after the limit");
    assert_eq!((rec.usage.prompt, rec.usage.completion), (200, 2));
}

// ---------------------------------------------------------------------------------------
// The CLI
// ---------------------------------------------------------------------------------------

fn write_task(sb: &Sandbox, task: &Task) -> PathBuf {
    let path = sb.path().join(format!("{}.json", task.id));
    std::fs::write(&path, serde_json::to_string_pretty(task).unwrap()).unwrap();
    path
}

/// `pincer run` of the task file with `agent` on the desktop named `desktop`, in the
/// sandbox's state and envs file, with no Anthropic or Gemini key in its environment (a test
/// adds the one it means).
fn pincer_run(sb: &Sandbox, file: &Path, agent: &str, desktop: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin("pincer"));
    cmd.args(["run", "--tasks"])
        .arg(file)
        .args(["--agent", agent, "--set"])
        .arg(format!("desktop={desktop}"))
        .env("PINCER_STATE_DIR", sb.path().join("state"))
        .env("PINCER_ENVS", sb.path().join("envs.toml"))
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .env_remove("GOOGLE_API_KEY");
    cmd
}

#[test]
fn pincer_run_stops_before_starting_when_the_key_or_an_option_is_wrong() {
    let sb = Sandbox::new();
    let file = write_task(&sb, &zenity_task("llm-cli-nokey", 3));
    let run = |agent: &str, opts: &[&str]| {
        let mut cmd = pincer_run(&sb, &file, agent, "nowhere");
        for o in opts {
            cmd.args(["--agent-opt", o]);
        }
        let out = cmd.output().expect("run pincer");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run("anthropic:claude-sonnet-5-5", &[]);
    assert!(e.contains("set ANTHROPIC_API_KEY"), "{e}");
    let e = run("gemini:gemini-3.8-flash", &[]);
    assert!(e.contains("set GEMINI_API_KEY or GOOGLE_API_KEY"), "{e}");
    let e = run("openai:gpt-6.1-terra", &["structure=swarm"]);
    assert!(
        e.contains("structure=swarm") && e.contains("single, planner, per-env"),
        "{e}"
    );
    let e = run("anthropic:claude-sonnet-5-5", &["temperature=0.5"]);
    assert!(
        e.contains("takes no temperature") && e.contains("api_version=2023-06-01"),
        "{e}"
    );
    let e = run("llama:3", &[]);
    assert!(e.contains("unknown provider 'llama'"), "{e}");
    let mut cmd = pincer_run(&sb, &file, "openai:m", "nowhere");
    let out = cmd.args(["--feedback", "end"]).output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("give --attempts 2 or more"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pincer_run_takes_the_key_from_the_environment_and_writes_it_nowhere() {
    let p = Provider::Gemini;
    let sb = Sandbox::new();
    let d = sb.desktop("llm-cli", "800x600", &[]);
    let standin = StandIn::start(zenity_solver(p)).await;
    let file = write_task(&sb, &zenity_task("llm-cli", 8));
    let out_dir = sb.path().join("run");
    let mut cmd = pincer_run(&sb, &file, "gemini:stand-in-model", &d.name);
    cmd.args([
        "--agent-opt",
        &format!("base_url={}", standin.base_url(p)),
        "--agent-opt",
        "history=2",
        "--no-report",
        "--out",
    ])
    .arg(&out_dir)
    .env("GEMINI_API_KEY", KEY);
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("run pincer");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY));
    let recs = record::read_results(&out_dir.join("results.jsonl")).unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].termination, Termination::Success, "{:?}", recs[0]);
    assert_eq!(
        (recs[0].usage.prompt, recs[0].usage.completion),
        standin.served()
    );
    let reqs = standin.requests();
    assert!(
        reqs.iter()
            .all(|r| r.headers.get("x-goog-api-key").map(String::as_str) == Some(KEY)),
        "every call carries the key from GEMINI_API_KEY"
    );
    assert!(
        reqs.iter().all(|r| !r.path.contains(KEY)),
        "never in the URL"
    );
    assert_no_key_under(&out_dir);
}

/// A model is offered a task's API tools only when the task declares them and the run
/// offers them (`ObservationConfig::tools`, `pincer run --tools`); its call goes through the
/// tool class to the guest's sandbox, the record counts it, and the tool's output comes
/// back in the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_see_api_tools_only_when_the_task_declares_them_and_the_run_offers_them() {
    use std::os::unix::fs::PermissionsExt;
    let p = Provider::OpenAi;
    let sb = Sandbox::new();
    // The tool runs as nobody when the test runs as root: let it through to its directory.
    std::fs::set_permissions(sb.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let notes = sb.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o777)).unwrap();
    let n = notes.display().to_string();
    let desktop = sb.desktop("api", "800x600", &["--allow-tools"]);
    let env = Arc::new(desktop.connect().await);
    let task = |id: &str, tools: bool| -> Task {
        let mut t = json!({
            "id": id,
            "instruction": "Make a note called pincer.",
            "envs": {"desktop": {"platform": "linux"}},
            "checkpoints": [{"id": "noted", "env": "desktop", "check": "file_exists", "args": {"path": format!("{n}/pincer")}}],
            "limits": {"max_steps": 4}
        });
        if tools {
            t["tools"] = json!({"desktop": [{
                "name": "write_note", "description": "Makes a note.",
                "params": [{"name": "name", "type": "string", "required": true, "max_len": 20, "charset": "-_"}],
                "argv": ["/usr/bin/touch", format!("{n}/{{name}}")],
                "sandbox": {"write": [n]}
            }]});
        }
        serde_json::from_value(t).unwrap()
    };
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let log = seen.clone();
    let script: Script = Box::new(move |r: &Recorded| {
        let names = tool_names(p, &r.body);
        log.lock().unwrap().push(names.clone());
        let told = text_of(&r.body).contains("tool write_note succeeded");
        if names.iter().any(|t| t == "api_write_note") && !told {
            call(p, "api_write_note", json!({"name": "pincer"}), (10, 1))
        } else {
            call(p, "complete", json!({}), (10, 1))
        }
    });
    let standin = StandIn::start(script).await;
    let settings = standin.settings(p, &[]);
    let run = async |task: Task, tools: bool, out: &str| {
        seen.lock().unwrap().clear();
        let set = EnvSet {
            name: "s0".into(),
            envs: [("desktop".to_owned(), env.clone())].into(),
            platforms: roles(&["desktop"]),
            vms: Default::default(),
        };
        let s = settings.clone();
        let agent: AgentFactory = Arc::new(move |seed| llm::build(&s, seed));
        let rec = pincer::run::run(RunConfig {
            tasks: vec![task],
            agent,
            agent_name: "stand-in".into(),
            sets: vec![set],
            options: RunOptions::new(
                sb.path().join(out),
                ObservationConfig {
                    tools,
                    ..ObservationConfig::default()
                },
            ),
            cancel: Arc::new(AtomicBool::new(false)),
        })
        .await
        .expect("the run finishes")
        .remove(0);
        let names = seen.lock().unwrap().clone();
        (rec, names)
    };
    let api = |names: &[Vec<String>]| names.iter().flatten().any(|t| t.starts_with("api_"));

    // Declared but not offered: the model never sees the tool, the note is not made.
    let (rec, names) = run(task("declared-not-offered", true), false, "run1").await;
    assert!(!names.is_empty() && !api(&names), "{names:?}");
    assert_eq!(rec.tool_calls, 0);
    assert!(!notes.join("pincer").exists());
    // Offered, but the task declares none.
    let (rec, names) = run(task("none-declared", false), true, "run2").await;
    assert!(!names.is_empty() && !api(&names), "{names:?}");
    assert_eq!(rec.tool_calls, 0);
    // Declared and offered: seen, called, run in the sandbox, counted, told.
    let (rec, names) = run(task("offered", true), true, "run3").await;
    assert!(api(&names), "{names:?}");
    assert_eq!(rec.termination, Termination::Success, "{rec:?}");
    assert_eq!(rec.tool_calls, 1);
    assert!(notes.join("pincer").exists());
}
