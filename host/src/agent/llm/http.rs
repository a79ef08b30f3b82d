//! The HTTP client of one agent: POSTs a chat to the provider, retries 429s, 5xxs and lost
//! connections with exponential backoff (or as long as the server asks, in a header or in
//! Gemini's `RetryInfo`; one that asks too long fails the call at once), bounds each
//! request by the timeout, and returns the decoded reply with the exchange to store. The
//! key is sent only as a request header (`Authorization`, `x-api-key`, `x-goog-api-key`),
//! never in the URL, and is scrubbed from every error text.

use super::conversation::Message;
use super::wire::{self, AnthropicVersion, Chat, Images, Reply};
use super::{Provider, Secret, Settings};
use crate::agent::{AgentError, Exchange, ToolSpec};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderValue};
use std::time::{Duration, Instant};

/// The first wait before retrying; doubled each time.
const BACKOFF_BASE: Duration = Duration::from_secs(1);

/// The longest wait between attempts. A server that asks for a longer one (a quota that
/// resets in an hour) gets no further attempt: the call fails at once and says how long
/// the server asked, since a retry before then fails again and sleeping until then would
/// hold the task for nothing. This is the only bound on a wait: a model call has no
/// deadline of its own (`timeout_s` bounds each attempt; the runner checks a task's
/// `max_seconds` between steps).
const MAX_WAIT: Duration = Duration::from_secs(120);

/// One model call's outcome.
#[derive(Debug)]
pub(crate) struct Call {
    /// The decoded reply.
    pub(crate) reply: Reply,
    /// What is stored in the trajectory.
    pub(crate) exchange: Exchange,
}

/// A provider endpoint with its client.
pub(crate) struct Backend {
    provider: Provider,
    model: String,
    /// The full request URL.
    url: String,
    key: Option<Secret>,
    client: reqwest::Client,
    retries: u32,
    timeout: Duration,
    temperature: Option<f64>,
    max_tokens: Option<u32>,
    openai_official: bool,
    anthropic_version: AnthropicVersion,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("provider", &self.provider)
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Backend {
    pub(crate) fn new(s: &Settings, key: Option<Secret>) -> Result<Self, AgentError> {
        let client = crate::web::client(Some(s.timeout), s.timeout.min(Duration::from_secs(15)))
            .map_err(|e| AgentError::Setup(format!("the model API's client: {e}")))?;
        Ok(Self {
            provider: s.provider,
            model: s.model.clone(),
            url: format!("{}{}", s.base_url, wire::path(s.provider, &s.model)),
            key,
            client,
            retries: s.retries,
            timeout: s.timeout,
            temperature: s.temperature,
            max_tokens: s.max_tokens,
            openai_official: s.provider == Provider::OpenAi && super::is_openai_host(&s.base_url),
            anthropic_version: s.anthropic_version,
        })
    }

    fn headers(&self) -> Result<HeaderMap, AgentError> {
        let mut h = HeaderMap::new();
        h.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let bad_key = || {
            AgentError::Setup(format!(
                "the {} API key holds characters that cannot go in an HTTP header",
                self.provider
            ))
        };
        if let Some(k) = &self.key {
            let (name, value) = match self.provider {
                Provider::OpenAi => ("authorization", format!("Bearer {}", k.expose())),
                Provider::Anthropic => ("x-api-key", k.expose().to_owned()),
                Provider::Gemini => ("x-goog-api-key", k.expose().to_owned()),
            };
            let mut v = HeaderValue::from_str(&value).map_err(|_| bad_key())?;
            v.set_sensitive(true);
            h.insert(name, v);
        }
        if self.provider == Provider::Anthropic {
            h.insert(
                "anthropic-version",
                HeaderValue::from_static(self.anthropic_version.as_str()),
            );
        }
        Ok(h)
    }

    /// Removes the key from a text that may quote it.
    fn scrub(&self, text: String) -> String {
        match &self.key {
            Some(k) if !k.expose().is_empty() => text.replace(k.expose(), "<redacted>"),
            _ => text,
        }
    }

    /// Sends one chat, retrying what may pass on a second try.
    pub(crate) async fn chat(
        &self,
        who: &str,
        system: &str,
        messages: &[Message],
        tools: &[ToolSpec],
    ) -> Result<Call, AgentError> {
        let chat = Chat {
            model: &self.model,
            system,
            messages,
            tools,
            temperature: self.temperature,
            max_tokens: self.max_tokens,
            openai_official: self.openai_official,
        };
        let body = serde_json::to_vec(&wire::encode(self.provider, &chat, Images::Inline))
            .map_err(|e| AgentError::Model(format!("encoding the request: {e}")))?;
        let stored = wire::encode(self.provider, &chat, Images::Reference);
        let headers = self.headers()?;
        self.send(who, &headers, body, stored)
            .await
            .map_err(|e| AgentError::Model(self.scrub(e.to_string())))
    }

    /// The attempts of one call. Server texts in the error are not scrubbed yet.
    async fn send(
        &self,
        who: &str,
        headers: &HeaderMap,
        body: Vec<u8>,
        stored: serde_json::Value,
    ) -> Result<Call, CallError> {
        let fail = |failure| CallError {
            provider: self.provider,
            url: self.url.clone(),
            failure,
        };
        let attempts = self.retries + 1;
        let mut last = String::new();
        for attempt in 0..attempts {
            let started = Instant::now();
            let sent = self
                .client
                .post(&self.url)
                .headers(headers.clone())
                .body(body.clone())
                .send()
                .await;
            let wait = match sent {
                Ok(resp) => {
                    let status = resp.status();
                    let asked = retry_after(resp.headers());
                    match resp.bytes().await {
                        Ok(bytes) if status.is_success() => {
                            let v: serde_json::Value =
                                serde_json::from_slice(&bytes).map_err(|e| {
                                    fail(Failure::NotJson {
                                        error: e.to_string(),
                                        body: wire::error_message(&bytes),
                                    })
                                })?;
                            let reply = wire::decode(self.provider, &v)
                                .map_err(|e| fail(Failure::Unexpected(e)))?;
                            let exchange = Exchange {
                                who: who.to_owned(),
                                request: stored,
                                response: v,
                                ms: started.elapsed().as_millis() as u64,
                                usage: reply.usage,
                            };
                            return Ok(Call { reply, exchange });
                        }
                        Ok(bytes) => {
                            let asked = asked.or_else(|| wire::retry_delay(&bytes));
                            let answer = format!(
                                "{} {}: {}",
                                status.as_u16(),
                                status.canonical_reason().unwrap_or(""),
                                wire::error_message(&bytes)
                            );
                            if !retryable(status) {
                                return Err(fail(Failure::Refused {
                                    answer,
                                    hint: self.hint(status),
                                }));
                            }
                            last = answer;
                            asked
                        }
                        Err(e) => {
                            last = format!(
                                "{} then the body was lost: {}",
                                status.as_u16(),
                                describe(&e)
                            );
                            None
                        }
                    }
                }
                Err(e) if e.is_timeout() => {
                    last = format!("no answer within {} s (timeout_s)", self.timeout.as_secs());
                    None
                }
                Err(e) if e.is_connect() || e.is_request() => {
                    last = describe(&e);
                    None
                }
                Err(e) => return Err(fail(Failure::Transport(describe(&e)))),
            };
            if attempt + 1 < attempts {
                let wait = match wait {
                    Some(asked) if asked > MAX_WAIT => {
                        return Err(fail(Failure::WaitTooLong {
                            asked,
                            answer: last,
                        }));
                    }
                    Some(asked) => asked,
                    None => backoff(attempt),
                };
                tracing::warn!(provider = %self.provider, attempt = attempt + 1, wait_ms = wait.as_millis() as u64, "model API call failed, retrying: {}", self.scrub(last.clone()));
                tokio::time::sleep(wait).await;
            }
        }
        Err(fail(Failure::Exhausted { attempts, last }))
    }

    /// What to do about a refused request.
    fn hint(&self, status: StatusCode) -> String {
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => " (check the API key)".to_owned(),
            StatusCode::NOT_FOUND => {
                format!(" (is the model '{}' and the base_url right?)", self.model)
            }
            _ => String::new(),
        }
    }
}

/// Why a model call failed: the endpoint, then what went wrong there.
#[derive(Debug, thiserror::Error)]
#[error("{provider} API at {url} {failure}")]
struct CallError {
    provider: Provider,
    url: String,
    failure: Failure,
}

/// What went wrong in a model call.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// An answer that asking again cannot change: a bad key, an unknown model, a bad request.
    #[error("refused the request: {answer}{hint}")]
    Refused {
        /// The status and the server's message.
        answer: String,
        /// What to check, if pincer knows.
        hint: String,
    },
    /// A successful answer whose body is not JSON.
    #[error("sent a reply that is not JSON ({error}): {body}")]
    NotJson {
        /// Why it does not parse.
        error: String,
        /// The start of the body.
        body: String,
    },
    /// A JSON reply that is not what the API documents.
    #[error("sent a reply pincer cannot read: {}", .0.0)]
    Unexpected(wire::WireError),
    /// A failure of the HTTP client that another attempt would repeat.
    #[error("failed: {0}")]
    Transport(String),
    /// The server asked for a longer wait before the next attempt than pincer waits.
    #[error(
        "asked to wait {} s before the next attempt, more than the {} s pincer waits, so the call stops here (try again after that wait); the answer: {answer}",
        asked.as_secs_f64(),
        MAX_WAIT.as_secs()
    )]
    WaitTooLong {
        /// The wait the server asked for.
        asked: Duration,
        /// The status and the server's message.
        answer: String,
    },
    /// Every attempt failed in a way that may pass.
    #[error("failed {attempts} time{}; the last: {last}", if *attempts == 1 { "" } else { "s" })]
    Exhausted {
        /// How many attempts were made.
        attempts: u32,
        /// What the last one came to.
        last: String,
    },
}

/// Rate limits, overloads, server errors and request timeouts may pass.
fn retryable(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
        || status.is_server_error()
}

/// How long the server's headers ask us to wait: `retry-after-ms` (OpenAI) or
/// `Retry-After` in seconds. (HTTP dates fall back to the backoff.)
fn retry_after(h: &HeaderMap) -> Option<Duration> {
    let num = |name: &str| {
        h.get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    // try_from: a huge number must not panic the agent.
    num("retry-after-ms")
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1000.0).ok())
        .or_else(|| num("retry-after").and_then(|s| Duration::try_from_secs_f64(s).ok()))
}

/// 1 s, 2 s, 4 s, ... with up to a quarter more at random, so parallel workers spread out.
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let base = BACKOFF_BASE.saturating_mul(1u32 << attempt.min(6));
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    let jitter = (h.finish() % 1000) as f64 / 4000.0;
    base.mul_f64(1.0 + jitter)
}

/// An error with its causes, without the URL (the caller names the endpoint).
fn describe(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_seconds_or_milliseconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("100000"));
        assert_eq!(
            retry_after(&h),
            Some(Duration::from_secs(100_000)),
            "kept whole, so the call can say how long was asked"
        );
        h.insert("retry-after-ms", HeaderValue::from_static("1e300"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(100_000)));
    }

    #[test]
    fn backoff_doubles_with_bounded_jitter() {
        for a in 0..4 {
            let b = backoff(a);
            let base = BACKOFF_BASE * (1 << a);
            assert!(b >= base && b <= base.mul_f64(1.25), "{a}: {b:?}");
        }
        assert!(
            retryable(StatusCode::TOO_MANY_REQUESTS)
                && retryable(StatusCode::BAD_GATEWAY)
                && retryable(StatusCode::from_u16(529).unwrap())
        );
        assert!(!retryable(StatusCode::BAD_REQUEST) && !retryable(StatusCode::UNAUTHORIZED));
    }

    #[test]
    fn keys_go_in_headers_and_never_into_texts() {
        let s = Settings::parse("gemini:gemini-3.8-flash", &[]).unwrap();
        let b = Backend::new(&s, Some(Secret("AIza-secret".into()))).unwrap();
        assert_eq!(
            b.url,
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-3.8-flash:generateContent"
        );
        let h = b.headers().unwrap();
        assert_eq!(h["x-goog-api-key"], "AIza-secret");
        assert!(h["x-goog-api-key"].is_sensitive());
        assert_eq!(b.scrub("bad key AIza-secret".into()), "bad key <redacted>");
        assert!(!format!("{b:?}").contains("AIza"));
        let anthropic = |o: &[&str]| {
            let o: Vec<String> = o.iter().map(|s| (*s).to_owned()).collect();
            let s = Settings::parse("anthropic:claude", &o).unwrap();
            Backend::new(&s, Some(Secret("sk-ant".into())))
                .unwrap()
                .headers()
                .unwrap()
        };
        let h = anthropic(&[]);
        assert_eq!(
            (
                h["x-api-key"].to_str().unwrap(),
                h["anthropic-version"].to_str().unwrap()
            ),
            ("sk-ant", "2026-10-21")
        );
        let h = anthropic(&["api_version=2023-06-01"]);
        assert_eq!(h["anthropic-version"], "2023-06-01");
        let s = Settings::parse(
            "openai:llama",
            &["base_url=http://localhost:11434/v1".to_owned()],
        )
        .unwrap();
        let b = Backend::new(&s, None).unwrap();
        assert_eq!(b.url, "http://localhost:11434/v1/chat/completions");
        assert!(b.headers().unwrap().get("authorization").is_none());
        assert!(!b.openai_official);
    }
}
