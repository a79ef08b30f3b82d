//! Android's own state and setup, as typed requests (protocol v2): a probe reads one thing
//! (a setting, content-provider rows, the app in front, the packages, a property, the
//! battery, the radios) and a setup step changes one (start or stop an app, clear its data,
//! put a setting, insert or delete rows). The shim runs Android's own command for each with
//! arguments built from these fields, never through a shell, so probes are as safe as file
//! reads and read-only guests allow them; every field is checked here first.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest name, key, URI or value a request may carry.
pub const MAX_FIELD: usize = 4096;

/// One of Android's settings tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Namespace {
    /// `settings ... system`.
    System,
    /// `settings ... secure`.
    Secure,
    /// `settings ... global`.
    Global,
}

impl Namespace {
    /// The word `settings` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Secure => "secure",
            Self::Global => "global",
        }
    }
}

impl std::str::FromStr for Namespace {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "system" => Ok(Self::System),
            "secure" => Ok(Self::Secure),
            "global" => Ok(Self::Global),
            other => Err(format!(
                "'{other}' is not a settings namespace: use system, secure or global"
            )),
        }
    }
}

/// A read of the device's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AndroidQuery {
    /// `settings get NAMESPACE KEY`.
    Setting {
        /// The table.
        namespace: Namespace,
        /// The key (`bluetooth_name`).
        key: String,
    },
    /// `content query`: rows of a content provider.
    Content {
        /// `content://sms/inbox`.
        uri: String,
        /// Columns to read (all when empty).
        projection: Vec<String>,
        /// An SQL `WHERE` clause, if any.
        selection: Option<String>,
        /// An SQL `ORDER BY`, if any.
        sort: Option<String>,
    },
    /// The app in front and its activity.
    Foreground,
    /// Installed packages with their version codes.
    Packages,
    /// `getprop NAME`.
    Property {
        /// `ro.build.version.sdk`.
        name: String,
    },
    /// Charge and charger.
    Battery,
    /// Wi-Fi and airplane mode.
    Radios,
    /// The screen's size, density and rotation.
    Display,
}

/// What an [`AndroidQuery`] found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AndroidAnswer {
    /// A setting's value; `None` when unset.
    Setting(Option<String>),
    /// Rows: column to value (`None` for SQL NULL).
    Rows(Vec<BTreeMap<String, Option<String>>>),
    /// The app in front, if one is.
    Foreground(Option<ForegroundApp>),
    /// Installed packages.
    Packages(Vec<Package>),
    /// A property's value (empty when unset).
    Property(String),
    /// The battery.
    Battery(Battery),
    /// The radios.
    Radios(Radios),
    /// The display.
    Display(Display),
}

/// The display.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Display {
    /// Width in pixels (as apps see it: the override when there is one).
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Dots per inch.
    pub density: u32,
    /// Quarter turns from the natural orientation (0 to 3).
    pub rotation: u32,
}

/// The app in front.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForegroundApp {
    /// `com.android.settings`.
    pub package: String,
    /// `.Settings`, when an activity is named.
    pub activity: Option<String>,
}

/// An installed package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// `com.android.contacts`.
    pub name: String,
    /// Its `versionCode`, when the device lists it.
    pub version_code: Option<u64>,
}

/// The battery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Battery {
    /// Charge, 0 to `scale`.
    pub level: u32,
    /// Full charge.
    pub scale: u32,
    /// Whether a charger is connected.
    pub plugged: bool,
}

/// The radios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Radios {
    /// Wi-Fi is on.
    pub wifi: bool,
    /// Airplane mode is on.
    pub airplane: bool,
}

/// A value put into a content-provider row (`content insert --bind COL:TYPE:VALUE`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentValue {
    /// `s:` text.
    Text(String),
    /// `l:` an integer.
    Integer(i64),
    /// `b:` a boolean.
    Bool(bool),
}

/// A change to the device, for setup (refused by read-only guests).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AndroidSetup {
    /// `am start -n COMPONENT` (`com.android.settings/.Settings`).
    StartActivity {
        /// The component.
        component: String,
    },
    /// `am force-stop PACKAGE`.
    ForceStop {
        /// The package.
        package: String,
    },
    /// `pm clear PACKAGE`: the app's data, as after installing.
    ClearData {
        /// The package.
        package: String,
    },
    /// `settings put NAMESPACE KEY VALUE`.
    PutSetting {
        /// The table.
        namespace: Namespace,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// `content insert --uri URI --bind ...`.
    ContentInsert {
        /// The provider.
        uri: String,
        /// Columns and values.
        values: Vec<(String, ContentValue)>,
    },
    /// `content delete --uri URI [--where W]`.
    ContentDelete {
        /// The provider.
        uri: String,
        /// Which rows (all when `None`).
        selection: Option<String>,
    },
}

/// Whether `s` is a name Android uses for keys, columns, packages and properties
/// (letters, digits, `_`, `.`, `-`), of a sane length. None starts with `-`: Android's
/// commands would read it as an option (`settings get system --user` names no key).
fn name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Checks a settings key before `settings` gets it, whichever request carries it (a
/// [`AndroidQuery::Setting`], a [`AndroidSetup::PutSetting`], or the settings probe,
/// `Probe::Setting`); the message says why it is refused.
pub fn setting_key(key: &str) -> Result<(), String> {
    if name(key) {
        Ok(())
    } else {
        Err(bad("setting", key, "is not a key (letters, digits, _ . -)"))
    }
}

/// A `content://` URI without spaces or control characters.
fn uri(s: &str) -> bool {
    s.starts_with("content://")
        && s.len() <= MAX_FIELD
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Text passed as one argument: no NUL (which no argument can hold), bounded.
fn text(s: &str) -> bool {
    s.len() <= MAX_FIELD && !s.contains('\0')
}

fn bad(what: &str, value: &str, rule: &str) -> String {
    format!(
        "{what} '{}' {rule}",
        value.chars().take(80).collect::<String>()
    )
}

impl AndroidQuery {
    /// Checks every field; the message says which and why.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Self::Setting { key, .. } => setting_key(key),
            Self::Content {
                uri: u,
                projection,
                selection,
                sort,
            } => {
                if !uri(u) {
                    return Err(bad("uri", u, "is not a content:// URI"));
                }
                if let Some(c) = projection.iter().find(|c| !name(c)) {
                    return Err(bad("column", c, "is not a column name"));
                }
                for t in [selection, sort].into_iter().flatten() {
                    if !text(t) {
                        return Err(bad("clause", t, "is too long or holds a NUL"));
                    }
                }
                Ok(())
            }
            Self::Property { name: n } if !name(n) => {
                Err(bad("property", n, "is not a property name"))
            }
            _ => Ok(()),
        }
    }
}

impl AndroidSetup {
    /// Checks every field; the message says which and why.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Self::StartActivity { component } => {
                let ok = component.split_once('/').is_some_and(|(p, a)| {
                    name(p)
                        && !a.is_empty()
                        && a.len() <= 256
                        && a.chars()
                            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$'))
                });
                if ok {
                    Ok(())
                } else {
                    Err(bad("component", component, "is not PACKAGE/ACTIVITY"))
                }
            }
            Self::ForceStop { package } | Self::ClearData { package } if !name(package) => {
                Err(bad("package", package, "is not a package name"))
            }
            Self::PutSetting { key, value, .. } => {
                setting_key(key)?;
                if text(value) {
                    Ok(())
                } else {
                    Err(bad("value", value, "is too long or holds a NUL"))
                }
            }
            Self::ContentInsert { uri: u, values } => {
                if !uri(u) {
                    return Err(bad("uri", u, "is not a content:// URI"));
                }
                if values.is_empty() {
                    return Err("content insert needs at least one value".into());
                }
                for (col, v) in values {
                    if !name(col) {
                        return Err(bad("column", col, "is not a column name"));
                    }
                    if let ContentValue::Text(t) = v
                        && !text(t)
                    {
                        return Err(bad("value", t, "is too long or holds a NUL"));
                    }
                }
                Ok(())
            }
            Self::ContentDelete { uri: u, selection } => {
                if !uri(u) {
                    return Err(bad("uri", u, "is not a content:// URI"));
                }
                match selection {
                    Some(t) if !text(t) => Err(bad("clause", t, "is too long or holds a NUL")),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_checked_before_any_command_runs() {
        let ok = AndroidQuery::Content {
            uri: "content://sms/inbox".into(),
            projection: vec!["address".into(), "body".into()],
            selection: Some("type=1 AND body LIKE '%hi%'".into()),
            sort: None,
        };
        assert_eq!(ok.validate(), Ok(()));
        let bad_uri = AndroidQuery::Content {
            uri: "content://sms/inbox; rm -rf /".into(),
            projection: vec![],
            selection: None,
            sort: None,
        };
        assert!(
            bad_uri
                .validate()
                .unwrap_err()
                .contains("not a content:// URI")
        );
        let bad_key = AndroidQuery::Setting {
            namespace: Namespace::Secure,
            key: "a b".into(),
        };
        assert!(bad_key.validate().is_err());
        // A leading '-' would be an option to Android's commands.
        for key in ["--user", "-x"] {
            let query = AndroidQuery::Setting {
                namespace: Namespace::System,
                key: key.into(),
            };
            assert!(query.validate().is_err(), "{key}");
            let put = AndroidSetup::PutSetting {
                namespace: Namespace::System,
                key: key.into(),
                value: "1".into(),
            };
            assert!(put.validate().is_err(), "{key}");
            assert!(setting_key(key).is_err(), "{key}");
        }
        assert_eq!(setting_key("screen_off_timeout"), Ok(()));
        assert!(
            AndroidSetup::ForceStop {
                package: "-f".into()
            }
            .validate()
            .is_err()
        );
        assert!(
            AndroidQuery::Property { name: "-Z".into() }
                .validate()
                .is_err()
        );
        assert!(
            AndroidSetup::StartActivity {
                component: "com.android.settings/.Settings".into()
            }
            .validate()
            .is_ok()
        );
        assert!(
            AndroidSetup::StartActivity {
                component: "com.android.settings".into()
            }
            .validate()
            .is_err()
        );
        assert!(
            AndroidSetup::ForceStop {
                package: "../x".into()
            }
            .validate()
            .is_err()
        );
        assert!(
            AndroidSetup::ContentInsert {
                uri: "content://x".into(),
                values: vec![]
            }
            .validate()
            .is_err()
        );
        assert_eq!("secure".parse(), Ok(Namespace::Secure));
        assert!(
            "lol"
                .parse::<Namespace>()
                .unwrap_err()
                .contains("system, secure or global")
        );
    }
}
