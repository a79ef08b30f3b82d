//! LLM agents over HTTP: an OpenAI-compatible Chat Completions backend (OpenAI, vLLM,
//! Ollama, LM Studio, OpenRouter), Anthropic Messages and Google Gemini, each with native
//! tool calling or JSON-in-text replies, in CRAB's three structures: one agent, a planner
//! with a tool agent, or a main agent with one sub-agent per environment.
//!
//! The layers: [`Settings`] (from `--agent PROVIDER:MODEL` and `--agent-opt KEY=VALUE`),
//! `conversation` (a provider-neutral chat with bounded history), `prompt` (what the
//! models are told), `wire` (the three request/response formats, pure and tested without
//! sockets), `http` (the client: timeouts, retries, keys) and `agent` (the structures).
//! API keys live only in the client's request headers: the exchanges kept for trajectories
//! are encoded with images replaced by file references and never see a header.

mod agent;
mod conversation;
mod http;
mod prompt;
mod wire;

use super::Agent;
use super::AgentError;
use std::time::Duration;
use wire::AnthropicVersion;

/// The model APIs pincer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Provider {
    /// OpenAI Chat Completions and servers compatible with it (vLLM, Ollama, LM Studio,
    /// OpenRouter).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini `generateContent`.
    Gemini,
}

impl Provider {
    /// Every provider, as written in `--agent`.
    pub const NAMES: &'static str = "openai, anthropic, gemini";

    fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            "gemini" | "google" => Some(Self::Gemini),
            _ => None,
        }
    }

    /// The API's address when `base_url` is not given.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::OpenAi => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com",
            Self::Gemini => "https://generativelanguage.googleapis.com/v1beta",
        }
    }

    /// The environment variables a key is read from, in order.
    fn key_vars(self) -> &'static [&'static str] {
        match self {
            Self::OpenAi => &["OPENAI_API_KEY"],
            Self::Anthropic => &["ANTHROPIC_API_KEY"],
            Self::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
        })
    }
}

/// How the model calls are arranged (CRAB's agent structures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Structure {
    /// One agent sees everything and calls the tools.
    Single,
    /// Multi-agent by functionality: a planner turns the observation into the next sub-goal
    /// in words, a tool agent turns the sub-goal into tool calls.
    Planner,
    /// Multi-agent by environment: a main agent picks an environment and a sub-goal, the
    /// sub-agent of that environment, seeing only its own view, makes the tool calls.
    PerEnv,
}

impl Structure {
    const NAMES: &'static str = "single, planner, per-env";

    fn parse(s: &str) -> Option<Self> {
        match s {
            "single" => Some(Self::Single),
            "planner" => Some(Self::Planner),
            "per-env" | "per_env" => Some(Self::PerEnv),
            _ => None,
        }
    }
}

/// How the model states its action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// The API's native tool (function) calling.
    Tools,
    /// A JSON object in the reply text, for models without tool calling.
    Json,
}

/// An API key. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where the API key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeySource {
    /// The first of these environment variables that is set; required.
    Env(Vec<String>),
    /// No key is sent (OpenAI-compatible local servers).
    Nothing,
    /// Given by the program embedding pincer.
    Given(Secret),
}

/// Settings of an LLM agent from `--agent PROVIDER:MODEL` and `--agent-opt KEY=VALUE`.
#[derive(Debug, Clone)]
pub struct Settings {
    provider: Provider,
    model: String,
    base_url: String,
    key: KeySource,
    structure: Structure,
    history: usize,
    mode: Mode,
    temperature: Option<f64>,
    max_tokens: Option<u32>,
    timeout: Duration,
    retries: u32,
    /// The `anthropic-version` sent (Anthropic only).
    anthropic_version: AnthropicVersion,
}

/// Why the agent settings are unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// `--agent` is not `PROVIDER:MODEL`.
    #[error("--agent '{0}': write PROVIDER:MODEL with PROVIDER one of {names} (e.g. anthropic:claude-sonnet-5-5)", names = Provider::NAMES)]
    Spec(String),
    /// The provider is not one pincer speaks.
    #[error("--agent: unknown provider '{0}'; use one of {names}", names = Provider::NAMES)]
    Provider(String),
    /// An option is not `KEY=VALUE`.
    #[error("--agent-opt '{0}': write KEY=VALUE, e.g. structure=planner")]
    NotKeyValue(String),
    /// An option pincer does not know.
    #[error("--agent-opt {0}: unknown option; the options are {OPTIONS}")]
    UnknownOption(String),
    /// An option's value is not allowed.
    #[error("--agent-opt {key}={value}: {expected}")]
    BadValue {
        /// The option.
        key: String,
        /// What was given.
        value: String,
        /// What is allowed.
        expected: String,
    },
    /// The API key's environment variable is not set.
    #[error(
        "the {provider} API needs a key: set {var} (or name another variable with --agent-opt api_key_env=NAME)"
    )]
    MissingKey {
        /// The provider.
        provider: Provider,
        /// The variable(s) to set.
        var: String,
    },
}

/// The options `--agent-opt` takes.
pub const OPTIONS: &str = "base_url, api_key_env, structure, history, mode, temperature, max_tokens, timeout_s, retries, api_version";

fn bad(key: &str, value: &str, expected: impl Into<String>) -> SettingsError {
    SettingsError::BadValue {
        key: key.to_owned(),
        value: value.to_owned(),
        expected: expected.into(),
    }
}

fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    key: &str,
    value: &str,
    lo: T,
    hi: T,
) -> Result<T, SettingsError> {
    let range = || format!("a number from {lo} to {hi}");
    let v: T = value.trim().parse().map_err(|_| bad(key, value, range()))?;
    if v < lo || v > hi {
        return Err(bad(key, value, range()));
    }
    Ok(v)
}

impl Settings {
    /// Parses `PROVIDER:MODEL` and the `KEY=VALUE` options, checking every value. Reads no
    /// environment variable (see [`Settings::check`]).
    pub fn parse(spec: &str, opts: &[String]) -> Result<Self, SettingsError> {
        let (p, model) = spec
            .split_once(':')
            .ok_or_else(|| SettingsError::Spec(spec.to_owned()))?;
        let provider = Provider::parse(p).ok_or_else(|| SettingsError::Provider(p.to_owned()))?;
        if model.trim().is_empty() {
            return Err(SettingsError::Spec(spec.to_owned()));
        }
        let mut s = Self {
            provider,
            model: model.trim().to_owned(),
            base_url: provider.default_base_url().to_owned(),
            key: KeySource::Env(
                provider
                    .key_vars()
                    .iter()
                    .map(|v| (*v).to_owned())
                    .collect(),
            ),
            structure: Structure::Single,
            history: 5,
            mode: Mode::Tools,
            temperature: None,
            max_tokens: None,
            timeout: Duration::from_secs(120),
            retries: 3,
            anthropic_version: AnthropicVersion::DEFAULT,
        };
        let mut base_url_given = false;
        let mut key_env: Option<String> = None;
        for opt in opts {
            let (key, value) = opt
                .split_once('=')
                .ok_or_else(|| SettingsError::NotKeyValue(opt.clone()))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "base_url" => {
                    let ok = (value.starts_with("http://") || value.starts_with("https://"))
                        && reqwest::Url::parse(value).is_ok_and(|u| u.host_str().is_some());
                    if !ok {
                        return Err(bad(
                            key,
                            value,
                            "an http:// or https:// URL, e.g. http://localhost:11434/v1",
                        ));
                    }
                    s.base_url = value.trim_end_matches('/').to_owned();
                    base_url_given = true;
                }
                "api_key_env" => {
                    let ok = !value.is_empty()
                        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if !ok {
                        return Err(bad(
                            key,
                            value,
                            "the name of an environment variable (letters, digits, _)",
                        ));
                    }
                    key_env = Some(value.to_owned());
                }
                "structure" => {
                    s.structure = Structure::parse(value)
                        .ok_or_else(|| bad(key, value, format!("one of {}", Structure::NAMES)))?
                }
                "history" => s.history = number(key, value, 0usize, 100)?,
                "mode" => {
                    s.mode = match value {
                        "tools" => Mode::Tools,
                        "json" => Mode::Json,
                        _ => return Err(bad(key, value, "one of tools, json")),
                    }
                }
                "temperature" => s.temperature = Some(number(key, value, 0.0f64, 2.0)?),
                "max_tokens" => s.max_tokens = Some(number(key, value, 1u32, 1_000_000)?),
                "timeout_s" => s.timeout = Duration::from_secs(number(key, value, 1u64, 3600)?),
                "retries" => s.retries = number(key, value, 0u32, 20)?,
                "api_version" if provider != Provider::Anthropic => {
                    return Err(bad(
                        key,
                        value,
                        "only the anthropic provider has API versions",
                    ));
                }
                "api_version" => {
                    s.anthropic_version = AnthropicVersion::parse(value).ok_or_else(|| {
                        let all: Vec<&str> =
                            AnthropicVersion::ALL.iter().map(|v| v.as_str()).collect();
                        bad(key, value, format!("one of {}", all.join(", ")))
                    })?
                }
                other => return Err(SettingsError::UnknownOption(other.to_owned())),
            }
        }
        if let Some(t) = s.temperature
            && provider == Provider::Anthropic
            && !s.anthropic_version.takes_temperature()
        {
            let oldest = AnthropicVersion::ALL[0].as_str();
            return Err(bad(
                "temperature",
                &t.to_string(),
                format!(
                    "the Anthropic API version {} takes no temperature; leave it out, or add --agent-opt api_version={oldest}",
                    s.anthropic_version.as_str()
                ),
            ));
        }
        s.key = match key_env {
            Some(var) => KeySource::Env(vec![var]),
            // An OpenAI key is sent to OpenAI only: a local server needs none, and another
            // host (OpenRouter) gets the key named by api_key_env.
            None if provider == Provider::OpenAi
                && base_url_given
                && !is_openai_host(&s.base_url) =>
            {
                KeySource::Nothing
            }
            None => s.key,
        };
        Ok(s)
    }

    /// Uses this key instead of reading one from the environment (for programs embedding
    /// pincer, and tests).
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.key = KeySource::Given(Secret(key.into()));
        self
    }

    /// Fails before a run starts if the API key is missing, saying what to set.
    pub fn check(&self) -> Result<(), SettingsError> {
        self.key().map(|_| ())
    }

    /// The provider.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// The model name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The API's base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The structure.
    pub fn structure(&self) -> Structure {
        self.structure
    }

    /// The key, read now.
    fn key(&self) -> Result<Option<Secret>, SettingsError> {
        match &self.key {
            KeySource::Nothing => Ok(None),
            KeySource::Given(k) => Ok(Some(k.clone())),
            KeySource::Env(vars) => vars
                .iter()
                .find_map(|v| std::env::var(v).ok().filter(|k| !k.trim().is_empty()))
                .map(|k| Some(Secret(k.trim().to_owned())))
                .ok_or_else(|| SettingsError::MissingKey {
                    provider: self.provider,
                    var: vars.join(" or "),
                }),
        }
    }
}

fn is_openai_host(base_url: &str) -> bool {
    reqwest::Url::parse(base_url).is_ok_and(|u| u.host_str() == Some("api.openai.com"))
}

/// Builds a fresh agent for one task run. The seed is the runner's (recorded with the
/// results); the model APIs are not seeded, so it does not reach them.
pub fn build(settings: &Settings, _seed: u64) -> Result<Box<dyn Agent>, AgentError> {
    let key = settings
        .key()
        .map_err(|e| AgentError::Setup(e.to_string()))?;
    let backend = http::Backend::new(settings, key)?;
    Ok(Box::new(agent::LlmAgent::new(settings, backend)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(o: &[&str]) -> Vec<String> {
        o.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn specs_and_options_parse_with_defaults() {
        let s = Settings::parse("anthropic:claude-sonnet-5-5", &[]).unwrap();
        assert_eq!(
            (s.provider, s.model.as_str(), s.base_url.as_str()),
            (
                Provider::Anthropic,
                "claude-sonnet-5-5",
                "https://api.anthropic.com"
            )
        );
        assert_eq!(
            (s.structure, s.history, s.mode, s.retries, s.timeout),
            (
                Structure::Single,
                5,
                Mode::Tools,
                3,
                Duration::from_secs(120)
            )
        );
        assert_eq!(s.key, KeySource::Env(vec!["ANTHROPIC_API_KEY".into()]));
        assert_eq!(s.anthropic_version, AnthropicVersion::DEFAULT);
        let g = Settings::parse("gemini:gemini-3.8-flash", &[]).unwrap();
        assert_eq!(
            g.key,
            KeySource::Env(vec!["GEMINI_API_KEY".into(), "GOOGLE_API_KEY".into()])
        );
        let s = Settings::parse(
            "openai:gpt-6.1-terra",
            &opts(&[
                "structure=per-env",
                "history=2",
                "mode=json",
                "temperature=0.2",
                "max_tokens=300",
                "timeout_s=30",
                "retries=0",
                "base_url=https://api.openai.com/v1/",
            ]),
        )
        .unwrap();
        assert_eq!(
            (
                s.structure,
                s.history,
                s.mode,
                s.temperature,
                s.max_tokens,
                s.retries
            ),
            (Structure::PerEnv, 2, Mode::Json, Some(0.2), Some(300), 0)
        );
        assert_eq!(s.base_url, "https://api.openai.com/v1");
        assert_eq!(
            s.key,
            KeySource::Env(vec!["OPENAI_API_KEY".into()]),
            "the real OpenAI host still needs its key"
        );
    }

    #[test]
    fn openai_keys_go_only_to_openai() {
        let local = Settings::parse(
            "openai:llama3.2",
            &opts(&["base_url=http://localhost:11434/v1"]),
        )
        .unwrap();
        assert_eq!(local.key, KeySource::Nothing);
        assert_eq!(local.check(), Ok(()));
        let router = Settings::parse(
            "openai:x",
            &opts(&[
                "base_url=https://openrouter.ai/api/v1",
                "api_key_env=OPENROUTER_API_KEY",
            ]),
        )
        .unwrap();
        assert_eq!(
            router.key,
            KeySource::Env(vec!["OPENROUTER_API_KEY".into()])
        );
    }

    #[test]
    fn bad_settings_name_the_option_and_what_is_allowed() {
        let err = |spec: &str, o: &[&str]| Settings::parse(spec, &opts(o)).unwrap_err().to_string();
        assert!(err("gpt-6.1-terra", &[]).contains("PROVIDER:MODEL"));
        assert!(err("mistral:large", &[]).contains("openai, anthropic, gemini"));
        assert!(err("openai:", &[]).contains("PROVIDER:MODEL"));
        assert!(err("openai:m", &["structure"]).contains("KEY=VALUE"));
        let e = err("openai:m", &["colour=blue"]);
        assert!(
            e.contains("colour") && e.contains("base_url, api_key_env, structure"),
            "{e}"
        );
        let e = err("openai:m", &["structure=swarm"]);
        assert!(
            e.contains("structure=swarm") && e.contains("single, planner, per-env"),
            "{e}"
        );
        assert!(err("openai:m", &["mode=xml"]).contains("tools, json"));
        assert!(err("openai:m", &["history=-1"]).contains("from 0 to 100"));
        assert!(err("openai:m", &["temperature=3"]).contains("from 0 to 2"));
        assert!(err("openai:m", &["timeout_s=0"]).contains("timeout_s"));
        assert!(err("openai:m", &["base_url=localhost:8000"]).contains("http://"));
        assert!(err("openai:m", &["api_key_env=MY-KEY"]).contains("environment variable"));
    }

    #[test]
    fn the_anthropic_version_is_chosen_and_gates_the_temperature() {
        let anthropic = |o: &[&str]| Settings::parse("anthropic:claude-sonnet-5-5", &opts(o));
        let old = anthropic(&["temperature=0.3", "api_version=2023-06-01"]).unwrap();
        assert_eq!(
            (old.anthropic_version, old.temperature),
            (AnthropicVersion::V2023_06_01, Some(0.3))
        );
        let e = anthropic(&["temperature=0.3"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "--agent-opt temperature=0.3: the Anthropic API version 2026-10-21 takes no temperature; leave it out, or add --agent-opt api_version=2023-06-01"
        );
        let e = anthropic(&["api_version=2024-01-01"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("one of 2023-06-01, 2026-10-21"), "{e}");
        let e = Settings::parse("openai:m", &opts(&["api_version=2023-06-01"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only the anthropic provider"), "{e}");
        assert!(
            Settings::parse("openai:m", &opts(&["temperature=0.3"])).is_ok(),
            "other providers keep their temperature"
        );
    }

    #[test]
    fn a_missing_key_is_reported_with_the_variable_to_set() {
        let s = Settings::parse(
            "anthropic:m",
            &opts(&["api_key_env=PINCER_TEST_SURELY_UNSET_KEY"]),
        )
        .unwrap();
        let e = s.check().unwrap_err();
        assert!(
            e.to_string().contains("set PINCER_TEST_SURELY_UNSET_KEY"),
            "{e}"
        );
        assert!(build(&s, 0).is_err());
        let s = s.with_api_key("sk-test");
        assert_eq!(s.check(), Ok(()));
        assert!(!format!("{s:?}").contains("sk-test"), "Debug hides the key");
    }
}
