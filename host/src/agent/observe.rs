//! Observations: what an agent is shown of each environment before it acts. Configurable
//! per run: the screenshot, the Set-of-Marks screenshot with its element list, the filtered
//! UI tree as text. Agents only ever get these views; the runner builds them from the
//! environments ([`crate::observe`]).

use super::actions::Marks;
use super::som::Element;
use crate::task::Platform;
use pincer_shared::tree::UiTree;
use serde::{Deserialize, Serialize};

/// What agents are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservationConfig {
    /// The plain screenshot.
    pub screenshot: bool,
    /// The Set-of-Marks screenshot and element list.
    pub marks: bool,
    /// The UI tree as indented text.
    pub tree_text: bool,
    /// Downscale images to fit this size (models rarely need 1080p).
    pub max_size: Option<(u32, u32)>,
    /// Offer the API tools tasks declare (`pincer run --tools`); without it agents act on
    /// screens only, whatever the task declares.
    #[serde(default)]
    pub tools: bool,
}

impl Default for ObservationConfig {
    fn default() -> Self {
        Self {
            screenshot: false,
            marks: true,
            tree_text: false,
            max_size: None,
            tools: false,
        }
    }
}

impl ObservationConfig {
    /// What agents see from a comma-separated choice of `marks` (or `som`), `screenshot`
    /// and `tree`, images fitted to `max_size`: `--observe` and the Python package's
    /// `observe=`.
    pub fn parse(spec: &str, max_size: Option<(u32, u32)>) -> Result<Self, String> {
        let mut cfg = Self {
            screenshot: false,
            marks: false,
            tree_text: false,
            max_size,
            tools: false,
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "marks" | "som" => cfg.marks = true,
                "screenshot" => cfg.screenshot = true,
                "tree" => cfg.tree_text = true,
                other => {
                    return Err(format!(
                        "unknown part '{other}' (use marks, screenshot, tree, comma-separated)"
                    ));
                }
            }
        }
        Ok(cfg)
    }
}

/// One environment as the agent sees it.
#[derive(Debug, Clone)]
pub struct View {
    /// Environment role.
    pub role: String,
    /// Its platform.
    pub platform: Platform,
    /// Screen size in screen pixels.
    pub screen: (u32, u32),
    /// Size of the images.
    pub image_size: (u32, u32),
    /// Plain screenshot, PNG.
    pub screenshot: Option<Vec<u8>>,
    /// Set-of-Marks screenshot, PNG.
    pub marked: Option<Vec<u8>>,
    /// The marked elements.
    pub elements: Vec<Element>,
    /// The UI tree, for agents that read it (the oracle) and for the text rendering.
    pub tree: Option<UiTree>,
    /// The tree as text, if configured.
    pub tree_text: Option<String>,
    /// Milliseconds spent building this view (capture, marks, encoding).
    pub build_ms: f64,
}

impl View {
    /// Element boxes by number, for resolving element targets.
    pub fn marks(&self) -> Marks {
        self.elements.iter().map(|e| (e.id, e.bounds)).collect()
    }
}

/// The tree as indented `role "name"` lines with bounds, for prompts.
pub fn tree_text(tree: &UiTree) -> String {
    let mut out = String::new();
    for (depth, n) in tree.root.walk() {
        let b = n
            .bounds
            .map(|b| format!(" @({},{} {}x{})", b.x, b.y, b.width, b.height))
            .unwrap_or_default();
        let text = n
            .text
            .as_deref()
            .filter(|t| !t.is_empty() && *t != n.name)
            .map(|t| format!(" text={:?}", t.chars().take(80).collect::<String>()))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}{} {:?}{b}{text}\n",
            "  ".repeat(depth.min(30)),
            n.role,
            n.name
        ));
    }
    out
}
