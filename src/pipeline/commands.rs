//! Chat commands handled before the agent, declared as data: name, aliases,
//! argument hint, owner-only, allowed in groups, description. Parsing
//! strips a `@BotName` mention (`/status@MyBot`) and splits the arguments.
//!
//! This file only recognises commands; executing them is the caller's job.

/// One command's declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    /// Argument hint (`<name>`), empty for none.
    pub args: &'static str,
    pub owner_only: bool,
    pub group_allowed: bool,
    pub description: &'static str,
    /// Upstream's command category (`session`, `options`, `status`, `management`).
    pub category: &'static str,
}

/// Every command pincer handles before the agent.
pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "new",
        aliases: &["reset", "clear"],
        args: "",
        owner_only: false,
        group_allowed: true,
        description: "Start a new session",
        category: "session",
    },
    CommandSpec {
        name: "status",
        aliases: &[],
        args: "",
        owner_only: false,
        group_allowed: true,
        description: "Show session, model and usage status",
        category: "status",
    },
    CommandSpec {
        name: "compact",
        aliases: &[],
        args: "",
        owner_only: false,
        group_allowed: true,
        description: "Summarise the session to free context",
        category: "session",
    },
    CommandSpec {
        name: "model",
        aliases: &[],
        args: "<name>",
        owner_only: false,
        group_allowed: true,
        description: "Show or switch the model",
        category: "options",
    },
    CommandSpec {
        name: "think",
        aliases: &[],
        args: "<level>",
        owner_only: false,
        group_allowed: true,
        description: "Set the thinking level",
        category: "options",
    },
    CommandSpec {
        name: "verbose",
        aliases: &[],
        args: "",
        owner_only: false,
        group_allowed: true,
        description: "Toggle verbose tool output",
        category: "options",
    },
    CommandSpec {
        name: "reasoning",
        aliases: &[],
        args: "",
        owner_only: false,
        group_allowed: true,
        description: "Toggle showing reasoning",
        category: "options",
    },
    CommandSpec {
        name: "stop",
        aliases: &[],
        args: "",
        owner_only: false,
        group_allowed: true,
        description: "Stop the running reply",
        category: "session",
    },
    CommandSpec {
        name: "subagents",
        aliases: &[],
        args: "[list|kill|steer|info|log]",
        owner_only: false,
        group_allowed: true,
        description: "List, stop or steer sub-agents",
        category: "management",
    },
    CommandSpec {
        name: "restart",
        aliases: &[],
        args: "",
        owner_only: true,
        group_allowed: false,
        description: "Restart the gateway",
        category: "management",
    },
    CommandSpec {
        name: "help",
        aliases: &[],
        args: "",
        owner_only: false,
        group_allowed: true,
        description: "List the commands",
        category: "status",
    },
];

/// A recognised command in a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInvocation {
    pub spec: CommandSpec,
    /// The name as typed (an alias stays visible: `/reset`).
    pub invoked_as: String,
    pub args: String,
}

/// Parses `text` as a command. A `@mention` suffix is accepted when it
/// names `bot_username` (or when no username is known).
pub fn parse_command(text: &str, bot_username: Option<&str>) -> Option<CommandInvocation> {
    let text = text.trim();
    let rest = text.strip_prefix('/')?;
    let (head, args) = match rest.split_once(char::is_whitespace) {
        Some((head, args)) => (head, args.trim()),
        None => (rest, ""),
    };
    let (name, mention) = match head.split_once('@') {
        Some((name, mention)) => (name, Some(mention)),
        None => (head, None),
    };
    if let (Some(mention), Some(bot)) = (mention, bot_username) {
        if !mention.eq_ignore_ascii_case(bot.trim_start_matches('@')) {
            return None;
        }
    }
    let name = name.to_lowercase();
    let spec = COMMANDS
        .iter()
        .find(|c| c.name == name || c.aliases.contains(&name.as_str()))?;
    Some(CommandInvocation {
        spec: *spec,
        invoked_as: name,
        args: args.to_string(),
    })
}

/// Reads `text` as one of `session.resetTriggers`: the message is a trigger, or starts with one followed by
/// whitespace (case-insensitive, as upstream). The answer is the `new` command, its arguments the text after
/// the trigger (the new session's first message, when there is one).
pub fn parse_reset_trigger(text: &str, triggers: &[String]) -> Option<CommandInvocation> {
    let text = text.trim();
    let lowered = text.to_lowercase();
    let spec = COMMANDS.iter().find(|c| c.name == "new")?;
    triggers.iter().find_map(|trigger| {
        let trigger = trigger.trim().to_lowercase();
        if trigger.is_empty() || !lowered.starts_with(&trigger) {
            return None;
        }
        let rest = &lowered[trigger.len()..];
        if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
            return None;
        }
        // Lower-casing may change byte lengths: take the payload from the original by characters.
        let skip = trigger.chars().count();
        let args: String = text.chars().skip(skip).collect();
        Some(CommandInvocation {
            spec: *spec,
            invoked_as: trigger,
            args: args.trim().to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_trigger_matches_whole_or_before_whitespace_and_keeps_the_rest() {
        let triggers = vec!["Start over".to_string(), "/fresh".to_string()];
        let bare = parse_reset_trigger("  start OVER ", &triggers).expect("whole message");
        assert_eq!((bare.spec.name, bare.args.as_str()), ("new", ""));
        let payload = parse_reset_trigger("START OVER What was it?\nline two", &triggers)
            .expect("trigger then text");
        assert_eq!(payload.args, "What was it?\nline two");
        assert!(parse_reset_trigger("/fresh", &triggers).is_some());
        assert!(parse_reset_trigger("start overture", &triggers).is_none());
        assert!(parse_reset_trigger("please start over", &triggers).is_none());
        assert!(parse_reset_trigger("start over", &[]).is_none());
    }

    #[test]
    fn mention_is_stripped_and_aliases_resolve() {
        let cmd = parse_command("/status@PincerBot", Some("pincerbot")).expect("command");
        assert_eq!(cmd.spec.name, "status");
        assert!(parse_command("/status@OtherBot", Some("pincerbot")).is_none());
        let reset = parse_command("/reset", None).expect("alias");
        assert_eq!(
            (reset.spec.name, reset.invoked_as.as_str()),
            ("new", "reset")
        );
        let model = parse_command("/model openai/gpt-4o", None).expect("args");
        assert_eq!(model.args, "openai/gpt-4o");
        assert!(parse_command("hello /status", None).is_none());
        assert!(parse_command("/unknown", None).is_none());
    }
}
