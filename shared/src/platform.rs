//! The platforms guests run on. One type for every place that names one: the handshake
//! (what a guest says it is), the envs file (what an environment was registered as) and
//! tasks (what a role needs), so a name that is none of them is refused where it is read.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Platforms environments run.
// The line above is also the task schema's description. Task files and the envs file spell
// it in lowercase (derived serde); the handshake carries it as that same string, not as a
// variant index (see `as_name`).
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

/// `#[serde(with = "platform::as_name")]`: a platform as its name (a string) in any format.
///
/// The derived encoding is a variant index in postcard; the handshake carried the name as
/// a plain string before the type existed, and guests and hosts of other builds still
/// read it so (and can say which platform they do not know, rather than fail on an index).
pub mod as_name {
    use super::Platform;
    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    /// Writes the platform's name.
    pub fn serialize<S: Serializer>(p: &Platform, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(p.as_str())
    }

    /// Reads a name; one this build does not know is an error naming it.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Platform, D::Error> {
        struct Name;
        impl Visitor<'_> for Name {
            type Value = Platform;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a platform name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Platform, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_str(Name)
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

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Named(#[serde(with = "as_name")] Platform);

    #[test]
    fn as_name_writes_the_string_and_refuses_unknown_names() {
        for p in Platform::ALL {
            let bytes = postcard::to_stdvec(&Named(*p)).unwrap();
            assert_eq!(bytes, postcard::to_stdvec(p.as_str()).unwrap());
            assert_eq!(postcard::from_bytes::<Named>(&bytes).unwrap(), Named(*p));
        }
        let windows = postcard::to_stdvec("windows").unwrap();
        assert!(postcard::from_bytes::<Named>(&windows).is_err());
        // Formats that keep the message carry the known names.
        let err = serde_json::from_str::<Named>("\"windows\"").unwrap_err();
        assert!(err.to_string().contains("linux, android"), "{err}");
    }
}
