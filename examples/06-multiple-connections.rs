//! 06-multiple-connections: a poll loop over many connections (librpma's example 06).
//!
//! `cargo run --example 06-multiple-connections [-- server ADDR PORT [clients] | client ADDR PORT seed]`

mod common;
use common::multi::{client, server};

fn main() {
    common::main_multi(|a| server(a, false), client, &["2"], &[&["1"], &["2"]]);
}
