//! The platforms guests run on, one type for every place that names one (tasks: what a
//! role needs), so a name that is none of them is refused where it is read.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Platforms environments run.
// The line above is also the task schema's description. Task files spell it in lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// A Linux desktop (local Xvfb desktop, VM, or machine).
    Linux,
    /// An Android device or emulator.
    Android,
}

impl Platform {
    /// Every platform this build knows, in the order messages list them.
    pub const ALL: &'static [Self] = &[Self::Linux, Self::Android];

    /// The name task files, the envs file, the command line and the handshake use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Android => "android",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A platform name this build does not know: a typo, or a guest newer than this build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown platform '{name}': the known platforms are {}", known())]
pub struct UnknownPlatform {
    /// The name as given.
    pub name: String,
}

/// The known names, for messages: "linux, android".
fn known() -> String {
    Platform::ALL
        .iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for Platform {
    type Err = UnknownPlatform;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPlatform { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_list_the_known() {
        for p in Platform::ALL {
            assert_eq!(p.to_string().parse::<Platform>(), Ok(*p));
            // The derived serde spelling is the same name.
            assert_eq!(
                serde_json::to_value(p).unwrap(),
                serde_json::json!(p.as_str())
            );
        }
        let err = "andriod".parse::<Platform>().unwrap_err();
        assert_eq!(err.name, "andriod");
        assert_eq!(
            err.to_string(),
            "unknown platform 'andriod': the known platforms are linux, android"
        );
        // Names are exact, as everywhere else they are written.
        assert!("Linux".parse::<Platform>().is_err());
    }
}
