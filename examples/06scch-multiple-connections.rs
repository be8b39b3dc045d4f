//! 06scch-multiple-connections: a poll loop over many connections, each with one completion channel for its CQs (librpma's example 06scch).
//!
//! `cargo run --example 06scch-multiple-connections [-- server ADDR PORT [clients] | client ADDR PORT seed]`

mod common;
use common::multi::{client, server};

fn main() {
    common::main_multi(|a| server(a, true), client, &["2"], &[&["1"], &["2"]]);
}
