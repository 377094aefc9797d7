//! The agent runtime: turns a user message into a streamed model reply.
//!
//! This module owns providers and the run of one turn. It never formats for a
//! chat platform and never talks to gateway connections directly: it emits
//! values that the gateway turns into protocol events.

pub mod compaction;
pub mod context;
pub mod failover;
pub mod memory_flush;
pub mod prompt;
pub mod prompt_files;
pub mod providers;
pub mod reasoning;
pub mod runs;
pub mod runtime;
pub mod session_note;
pub mod sessions;
pub mod skills;
pub mod subagents;
pub mod tool_loop;
pub mod turn;
