//! pincer's GNOME Shell extension (`shared/gnome-shell/`): windows for pincer-agent on GNOME
//! Wayland, where GNOME Shell refuses its own window list to other programs. `pincer-agent
//! install` puts it into the person's data directory and enables it; `pincer desktop up
//! --session wayland` does the same in the desktop's own home.

/// The extension's id, its directory's name under `gnome-shell/extensions/`.
pub const UUID: &str = "pincer@pincer.dev";
/// The bus name it takes on the session bus once GNOME Shell enabled it.
pub const BUS_NAME: &str = "dev.pincer.Shell";
/// Its files, by name.
pub const FILES: [(&str, &str); 2] = [
    (
        "metadata.json",
        include_str!("../gnome-shell/pincer@pincer.dev/metadata.json"),
    ),
    (
        "extension.js",
        include_str!("../gnome-shell/pincer@pincer.dev/extension.js"),
    ),
];

/// `enabled` (GSettings' `org.gnome.shell enabled-extensions`, as `gsettings get` prints
/// it) with `uuid` added (`add`) or removed, as `gsettings set` takes it.
pub fn enabled_with(enabled: &str, uuid: &str, add: bool) -> String {
    let mut ids: Vec<String> = enabled
        .trim()
        .trim_start_matches("@as")
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|id| id.trim().trim_matches('\'').trim_matches('"').to_owned())
        .filter(|id| !id.is_empty() && id != uuid)
        .collect();
    if add {
        ids.push(uuid.to_owned());
    }
    let quoted: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extension_is_added_to_and_removed_from_the_enabled_list_once() {
        assert_eq!(enabled_with("@as []", UUID, true), "['pincer@pincer.dev']");
        let others = "['ding@rastersoft.com', 'ubuntu-dock@ubuntu.com']";
        assert_eq!(
            enabled_with(others, UUID, true),
            "['ding@rastersoft.com', 'ubuntu-dock@ubuntu.com', 'pincer@pincer.dev']"
        );
        let with = enabled_with(others, UUID, true);
        assert_eq!(enabled_with(&with, UUID, true), with);
        assert_eq!(enabled_with(&with, UUID, false), others);
    }

    #[test]
    fn the_metadata_names_the_uuid_and_the_shell_versions_it_was_tested_on() {
        let metadata: serde_json::Value = serde_json::from_str(FILES[0].1).unwrap();
        assert_eq!(metadata["uuid"], UUID);
        assert!(
            metadata["shell-version"]
                .as_array()
                .unwrap()
                .contains(&"43".into())
        );
        assert!(FILES[1].1.contains(BUS_NAME));
    }
}
