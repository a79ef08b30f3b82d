//! The systemd user unit that runs the agent with a graphical session. `pincer-agent
//! install` writes it on physical machines and `pincer image build` puts the same unit into
//! every image, so a VM's agent starts exactly as a workstation's does.

/// The unit's file name.
pub const AGENT_UNIT: &str = "pincer-agent.service";

/// The target the unit is wanted by and bound to: desktop sessions that use systemd start
/// it, and stopping the session stops the agent with it.
pub const SESSION_TARGET: &str = "graphical-session.target";

/// The unit text for an agent at `exec` started with `args` (each quoted for systemd).
pub fn agent_unit(exec: &str, args: &[String]) -> String {
    let mut line = quote(exec);
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    format!(
        "[Unit]\n\
         Description=pincer guest agent\n\
         PartOf={SESSION_TARGET}\n\
         After={SESSION_TARGET}\n\
         \n\
         [Service]\n\
         ExecStart={line}\n\
         Restart=on-failure\n\
         RestartSec=1\n\
         \n\
         [Install]\n\
         WantedBy={SESSION_TARGET}\n"
    )
}

/// Quotes a word for an `ExecStart=` line: plain words stay as they are; anything else is
/// double-quoted with `\`, `"` escaped and `%` doubled (systemd's specifier character).
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=,+@".contains(c));
    if plain {
        return word.to_owned();
    }
    let mut out = String::from("\"");
    for c in word.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_runs_the_agent_with_the_session() {
        let u = agent_unit(
            "/usr/local/bin/pincer-agent",
            &["--listen".into(), "0.0.0.0:7000".into()],
        );
        assert!(
            u.contains("ExecStart=/usr/local/bin/pincer-agent --listen 0.0.0.0:7000\n"),
            "{u}"
        );
        assert!(u.contains("WantedBy=graphical-session.target"), "{u}");
        assert!(u.contains("PartOf=graphical-session.target"), "{u}");
    }

    #[test]
    fn words_that_systemd_would_read_otherwise_are_quoted() {
        assert_eq!(quote("/home/a b/agent"), "\"/home/a b/agent\"");
        assert_eq!(quote("100%"), "\"100%%\"");
        assert_eq!(quote("$HOME"), "\"$$HOME\"");
        assert_eq!(quote("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(quote(""), "\"\"");
    }
}
