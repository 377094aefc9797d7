//! pincer: a personal AI assistant gateway for small boards.
//!
//! The library holds every layer of the message path (see DESIGN.md); the
//! `pincer` binary in `main.rs` only parses arguments and calls into it.

pub mod agent;
pub mod app;
pub mod channels;
pub mod cli;
pub mod config;
pub mod cron;
pub mod gateway;
pub mod heartbeat;
pub mod media;
pub mod memory;
pub mod pipeline;
pub mod queue;
pub mod reply;
pub mod routing;
pub mod sandbox;
pub mod store;
pub mod system;
pub mod tools;
