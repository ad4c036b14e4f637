//! End-to-end tests: the real `sidechat serve` binary, spawned and driven over stdio.

// The rule against spawning around the reaper is the daemon's: a test process reaps nothing.
#![allow(clippy::disallowed_methods)]

mod acp_client;
mod acp_commands;
mod acp_first_prompt;
mod acp_ids;
mod backpressure;
mod bad_input;
mod budget;
#[path = "../support/byte_edits.rs"]
mod byte_edits;
mod bytes;
mod carry_over;
mod clock;
mod command_changes;
mod command_holds;
mod commands;
mod custom_commands;
mod delegation;
mod doctor;
mod effort;
mod environment;
mod event_order;
mod file_diff;
mod first_request;
mod fuzz;
mod harness;
mod history;
mod images;
mod in_flight;
mod instructions;
mod interjections;
mod lifetime;
mod listen;
mod listen_bridge;
mod listen_unix;
mod locked_database;
mod long_context;
mod mcp;
#[path = "../support/mcp_fixture.rs"]
mod mcp_fixture;
mod mentions;
mod mixed_writes;
mod permissions;
mod plans;
mod private_files;
mod protocol;
mod providers;
mod rewind;
mod rewind_commands;
mod run_ends;
mod runs;
mod sandbox;
mod secrets;
mod seq;
mod streams;
mod terminal;
mod titles;
mod transcripts;
mod two_daemons;
#[path = "../support/upstream.rs"]
mod upstream;
mod web;
mod web_fetch;
mod workload;
mod workspace_answers;
mod workspace_files;
