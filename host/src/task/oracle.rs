//! Oracle solutions: the steps that solve a task, written against UI-tree selectors rather
//! than coordinates so they work at any resolution and layout. The oracle agent replays
//! them through the same action path as every other agent, proving each task solvable.

use crate::eval::selector::Selector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where an oracle step acts: a UI node (its box's centre) or fixed coordinates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Locator {
    /// Screen pixels.
    Point {
        /// From the left.
        x: i32,
        /// From the top.
        y: i32,
    },
    /// The first node matching a selector.
    Node(Selector),
}

/// One step of an oracle solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum OracleStep {
    /// Click a node or a point.
    Click {
        /// Environment role (may be left out when the task has one environment).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// What to click.
        target: Locator,
        /// 2 for a double click.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u8>,
        /// Right button instead of left.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        right: bool,
    },
    /// Type text, optionally clicking a node first.
    Type {
        /// Environment role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// The text.
        text: String,
        /// Click this first.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<Locator>,
    },
    /// Press a key or combination ("enter", "ctrl+s").
    Key {
        /// Environment role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// The key or combination.
        key: String,
    },
    /// Wait until a node matching the selector is on screen.
    WaitFor {
        /// Environment role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// The node.
        target: Selector,
        /// Give up after this long (default 20 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Wait a fixed time.
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// Submit an answer.
    Submit {
        /// The answer.
        answer: String,
    },
    /// Declare the task done.
    Complete,
}
