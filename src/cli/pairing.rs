//! `pincer pairing list [channel]` and `pincer pairing approve <channel>
//! <code>`: DM pairing codes, asked of the running gateway over the
//! protocol (`pairing.list`, `pairing.approve`). Printing only.

use serde_json::json;

use super::client::GatewayClient;
use super::{ConnectArgs, GlobalArgs, PairingCommand};

type Connect = fn(&GlobalArgs, &ConnectArgs) -> Result<GatewayClient, String>;

pub fn run(global: &GlobalArgs, command: PairingCommand, connect: Connect) -> Result<(), String> {
    match command {
        PairingCommand::List {
            channel,
            connect: args,
        } => {
            let answer =
                connect(global, &args)?.call("pairing.list", json!({"channel": channel}))?;
            if args.json {
                println!("{answer:#}");
                return Ok(());
            }
            let empty = Vec::new();
            let rows = answer["pending"].as_array().unwrap_or(&empty);
            if rows.is_empty() {
                println!("no pending pairing codes");
            }
            for row in rows {
                println!(
                    "  {}  {}  sender {}  account {}",
                    row["channel"].as_str().unwrap_or("?"),
                    row["code"].as_str().unwrap_or("?"),
                    row["id"].as_str().unwrap_or("?"),
                    row["accountId"].as_str().unwrap_or("?"),
                );
            }
            Ok(())
        }
        PairingCommand::Approve {
            channel,
            code,
            connect: args,
        } => {
            let params = json!({"channel": channel, "code": code});
            let answer = connect(global, &args)?.call("pairing.approve", params)?;
            if args.json {
                println!("{answer:#}");
            } else {
                println!(
                    "approved {} sender {}{}",
                    channel,
                    answer["id"].as_str().unwrap_or("?"),
                    if answer["ownerSeeded"] == true {
                        " (now the owner)"
                    } else {
                        ""
                    }
                );
            }
            Ok(())
        }
    }
}
