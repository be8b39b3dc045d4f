//! 06-multiple-connections: a poll loop over many connections (librpma's example 06).
//!
//! Each client offers a name picked with its seed; the server reads it,
//! prints it and disconnects the client. As librpma's, the server ends
//! after 15 s without an event; the optional `clients` argument (a Rust
//! extension) ends it once that many clients have come and gone.
//!
//! `cargo run --example 06-multiple-connections [-- server ADDR PORT [clients] | client ADDR PORT seed]`

mod common;
use common::multi::{client, server};

fn main() {
    common::main_multi(|a| server(a, false), client, &["4"], &[&["8"], &["9"], &["11"], &["12"]]);
}
