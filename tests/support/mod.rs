//! Fakes of external services for integration tests, each speaking the real
//! wire format of the service it stands in for.
//!
//! Test files include this with `mod support;`. Nothing here may be used by
//! product code, and every fake binds 127.0.0.1 only. Each test binary uses
//! only some of the helpers, hence the `dead_code` allowance.
#![allow(dead_code)]

pub mod agent_loop;
pub mod fake_anthropic;
pub mod fake_ollama;
pub mod fake_openai;
pub mod fake_telegram;
pub mod gateway;
pub mod hub_harness;
pub mod media_files;
pub mod process_tree;
pub mod rauc;
pub mod recording_channel;
pub mod skip;
pub mod telegram_harness;
pub mod turn_harness;
pub mod wire_server;
pub mod ws_client;
