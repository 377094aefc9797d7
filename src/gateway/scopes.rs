//! Roles and operator scopes: which scope each gateway method needs.
//!
//! The table follows OpenClaw's method classification: an explicit scope per
//! known method, admin for the reserved prefixes, and admin for anything
//! unclassified (default deny). `operator.admin` satisfies every scope and
//! `operator.write` satisfies read.

pub const ADMIN: &str = "operator.admin";
pub const READ: &str = "operator.read";
pub const WRITE: &str = "operator.write";
pub const APPROVALS: &str = "operator.approvals";
pub const PAIRING: &str = "operator.pairing";
pub const TALK_SECRETS: &str = "operator.talk.secrets";

/// Every operator scope pincer knows.
pub const ALL_OPERATOR_SCOPES: &[&str] = &[ADMIN, READ, WRITE, APPROVALS, PAIRING, TALK_SECRETS];

/// The scopes OpenClaw's CLI asks for; also what a shared-secret HTTP caller gets.
pub const CLI_DEFAULT_SCOPES: &[&str] = &[ADMIN, READ, WRITE, APPROVALS, PAIRING, TALK_SECRETS];

const READ_METHODS: &[&str] = &[
    "health",
    "logs.tail",
    "channels.status",
    "status",
    "usage.status",
    "usage.cost",
    "models.list",
    "tools.catalog",
    "agents.list",
    "agent.identity.get",
    "skills.status",
    "sessions.list",
    "sessions.get",
    "sessions.preview",
    "sessions.resolve",
    "sessions.usage",
    "cron.list",
    "cron.status",
    "cron.runs",
    "gateway.identity.get",
    "system-presence",
    "last-heartbeat",
    "node.list",
    "node.describe",
    "chat.history",
    "config.get",
    "config.schema.lookup",
    "commands.list",
    "memory.status",
    "memory.search",
    "chat.startup",
    "sessions.subscribe",
    "sessions.messages.subscribe",
    "sessions.messages.unsubscribe",
    "sessions.describe",
    "sessions.branches.list",
    "sessions.observer.visibility",
    "sessions.companion.state",
    "models.authStatus",
    "tasks.list",
    "progressCard.get",
    "talk.catalog",
    "chat.metadata",
    "plugins.list",
    "system.info",
];

const WRITE_METHODS: &[&str] = &[
    "send",
    "poll",
    "agent",
    "agent.wait",
    "wake",
    "chat.send",
    "chat.abort",
    "node.invoke",
    "question.list",
    "pincer.memory.index",
];

const PAIRING_METHODS: &[&str] = &[
    "pairing.list",
    "pairing.approve",
    "device.pair.list",
    "device.pair.approve",
    "device.pair.reject",
    "device.pair.remove",
    "device.token.rotate",
    "device.token.revoke",
    "node.pair.request",
    "node.pair.list",
    "node.pair.approve",
    "node.pair.reject",
    "node.pair.verify",
    "node.rename",
    "channels.pairing.list",
    "channels.pairing.approve",
    "channels.pairing.dismiss",
];

const APPROVAL_METHODS: &[&str] = &[
    "exec.approval.request",
    "exec.approval.waitDecision",
    "exec.approval.resolve",
    "exec.approval.list",
    "exec.approval.get",
    "plugin.approval.list",
    "openclaw.approval.list",
    "approval.history",
];

/// Methods only a `node` role may call.
pub const NODE_ROLE_METHODS: &[&str] = &[
    "node.invoke.result",
    "node.event",
    "node.pending.drain",
    "node.canvas.capability.refresh",
    "node.pending.pull",
    "node.pending.ack",
    "skills.bins",
];

/// The scope a method needs (admin for anything unclassified).
pub fn required_scope(method: &str) -> &'static str {
    let lists: [(&[&str], &'static str); 4] = [
        (READ_METHODS, READ),
        (WRITE_METHODS, WRITE),
        (PAIRING_METHODS, PAIRING),
        (APPROVAL_METHODS, APPROVALS),
    ];
    for (methods, scope) in lists {
        if methods.contains(&method) {
            return scope;
        }
    }
    // Everything else, including upstream's reserved admin prefixes
    // (`config.*`, `exec.approvals.*`, `wizard.*`, `update.*`), is admin.
    ADMIN
}

/// Checks a caller's scopes against a method; `Err` names the missing scope.
pub fn authorize(method: &str, scopes: &[String]) -> Result<(), &'static str> {
    let has = |s: &str| scopes.iter().any(|x| x == s);
    if has(ADMIN) {
        return Ok(());
    }
    let required = required_scope(method);
    if required == READ && (has(READ) || has(WRITE)) {
        return Ok(());
    }
    if has(required) {
        return Ok(());
    }
    Err(required)
}

/// Whether `scope` names a scope pincer knows.
pub fn is_known_scope(scope: &str) -> bool {
    ALL_OPERATOR_SCOPES.contains(&scope) || scope == "operator.talk"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn write_satisfies_read_but_not_admin() {
        let s = scopes(&[WRITE]);
        assert!(authorize("sessions.list", &s).is_ok());
        assert!(authorize("chat.send", &s).is_ok());
        assert_eq!(authorize("sessions.patch", &s), Err(ADMIN));
        assert_eq!(authorize("config.patch", &s), Err(ADMIN));
    }

    #[test]
    fn qr_login_methods_need_admin_as_upstream() {
        assert_eq!(required_scope("web.login.start"), ADMIN);
        assert_eq!(required_scope("web.login.wait"), ADMIN);
        assert_eq!(required_scope("channels.logout"), ADMIN);
        assert_eq!(
            authorize("web.login.start", &scopes(&[READ, WRITE, PAIRING])),
            Err(ADMIN)
        );
    }

    #[test]
    fn unclassified_methods_need_admin() {
        assert_eq!(authorize("made.up", &scopes(&[READ, WRITE])), Err(ADMIN));
        assert!(authorize("made.up", &scopes(&[ADMIN])).is_ok());
    }

    #[test]
    fn read_only_callers_cannot_chat() {
        assert_eq!(authorize("chat.send", &scopes(&[READ])), Err(WRITE));
        assert_eq!(authorize("health", &scopes(&[])), Err(READ));
        assert_eq!(
            authorize("device.pair.list", &scopes(&[WRITE])),
            Err(PAIRING)
        );
    }

    #[test]
    fn config_get_is_read_other_config_methods_admin() {
        assert_eq!(required_scope("config.get"), READ);
        assert_eq!(required_scope("config.apply"), ADMIN);
        assert_eq!(required_scope("wizard.start"), ADMIN);
    }
}
