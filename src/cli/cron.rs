//! `pincer cron list|add|edit|remove|run`: scheduled jobs, managed on the running gateway over the protocol
//! (`cron.list`, `cron.add`, `cron.update`, `cron.remove`, `cron.run`). Argument shaping and printing only.

use clap::Subcommand;
use serde_json::{json, Map, Value};

use super::client::GatewayClient;
use super::{ConnectArgs, GlobalArgs};

type Connect = fn(&GlobalArgs, &ConnectArgs) -> Result<GatewayClient, String>;

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Jobs with their next run.
    List {
        /// Include disabled jobs.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Add a job: exactly one of --at, --every-ms, --cron; --message (isolated agent turn) or
    /// --system-event (main session).
    Add {
        #[arg(long)]
        name: String,
        #[command(flatten)]
        spec: JobSpec,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Change a job's fields.
    Edit {
        id: String,
        #[arg(long)]
        name: Option<String>,
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        #[arg(long)]
        disable: bool,
        #[command(flatten)]
        spec: JobSpec,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Delete a job and its run log.
    Remove {
        id: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Run a job now (--due: only if it is due).
    Run {
        id: String,
        #[arg(long)]
        due: bool,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// Schedule and payload flags shared by `add` and `edit`.
#[derive(Debug, clap::Args)]
pub struct JobSpec {
    /// One shot at an ISO-8601 time.
    #[arg(long, group = "schedule")]
    at: Option<String>,
    /// Fixed interval in milliseconds.
    #[arg(long, group = "schedule")]
    every_ms: Option<u64>,
    /// 5- or 6-field cron expression.
    #[arg(long, group = "schedule")]
    cron: Option<String>,
    /// IANA time zone for --cron.
    #[arg(long, requires = "cron")]
    tz: Option<String>,
    /// Agent-turn message (isolated session `cron:<id>`).
    #[arg(long, group = "payload")]
    message: Option<String>,
    /// System-event text for the main session.
    #[arg(long, group = "payload")]
    system_event: Option<String>,
}

impl JobSpec {
    fn fields(&self) -> Map<String, Value> {
        let mut fields = Map::new();
        if let Some(at) = &self.at {
            fields.insert("schedule".into(), json!({"kind": "at", "at": at}));
        } else if let Some(every) = self.every_ms {
            fields.insert(
                "schedule".into(),
                json!({"kind": "every", "everyMs": every}),
            );
        } else if let Some(expr) = &self.cron {
            fields.insert(
                "schedule".into(),
                json!({"kind": "cron", "expr": expr, "tz": self.tz}),
            );
        }
        if let Some(message) = &self.message {
            fields.insert("sessionTarget".into(), json!("isolated"));
            fields.insert(
                "payload".into(),
                json!({"kind": "agentTurn", "message": message}),
            );
        } else if let Some(text) = &self.system_event {
            fields.insert("sessionTarget".into(), json!("main"));
            fields.insert(
                "payload".into(),
                json!({"kind": "systemEvent", "text": text}),
            );
        }
        fields
    }
}

fn print(json_output: bool, answer: &Value, line: impl FnOnce(&Value) -> String) {
    if json_output {
        println!("{answer:#}");
    } else {
        println!("{}", line(answer));
    }
}

pub fn run(global: &GlobalArgs, command: CronCommand, connect: Connect) -> Result<(), String> {
    match command {
        CronCommand::List { all, connect: args } => {
            let answer =
                connect(global, &args)?.call("cron.list", json!({"includeDisabled": all}))?;
            let empty = Vec::new();
            print(args.json, &answer, |a| {
                let jobs = a["jobs"].as_array().unwrap_or(&empty);
                if jobs.is_empty() {
                    return "no cron jobs".into();
                }
                jobs.iter()
                    .map(|j| {
                        format!(
                            "  {}  {}  {}  next {}  last {}",
                            j["id"].as_str().unwrap_or("?"),
                            j["name"].as_str().unwrap_or("?"),
                            if j["enabled"] == true {
                                "enabled"
                            } else {
                                "disabled"
                            },
                            j["state"]["nextRunAtMs"],
                            j["state"]["lastStatus"].as_str().unwrap_or("-"),
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            Ok(())
        }
        CronCommand::Add {
            name,
            spec,
            connect: args,
        } => {
            let mut fields = spec.fields();
            fields.insert("name".into(), json!(name));
            let answer = connect(global, &args)?.call("cron.add", Value::Object(fields))?;
            print(args.json, &answer, |a| {
                format!("added {}", a["id"].as_str().unwrap_or("?"))
            });
            Ok(())
        }
        CronCommand::Edit {
            id,
            name,
            enable,
            disable,
            spec,
            connect: args,
        } => {
            let mut patch = spec.fields();
            if let Some(name) = name {
                patch.insert("name".into(), json!(name));
            }
            if enable || disable {
                patch.insert("enabled".into(), json!(enable));
            }
            let answer =
                connect(global, &args)?.call("cron.update", json!({"id": id, "patch": patch}))?;
            print(args.json, &answer, |a| {
                format!("updated {}", a["id"].as_str().unwrap_or("?"))
            });
            Ok(())
        }
        CronCommand::Remove { id, connect: args } => {
            let answer = connect(global, &args)?.call("cron.remove", json!({"id": id}))?;
            print(args.json, &answer, |a| {
                if a["removed"] == true {
                    format!("removed {id}")
                } else {
                    format!("no job {id}")
                }
            });
            Ok(())
        }
        CronCommand::Run {
            id,
            due,
            connect: args,
        } => {
            let mode = if due { "due" } else { "force" };
            let answer =
                connect(global, &args)?.call("cron.run", json!({"id": id, "mode": mode}))?;
            print(args.json, &answer, |a| {
                if a["ran"] == true {
                    format!("started {id}")
                } else {
                    format!("{id} not run: not due")
                }
            });
            Ok(())
        }
    }
}
