//! 08srq-simple-messages-ping-pong-with-srq: the ping-pong of example 08 with a server receiving through a shared receive queue and its receive CQ (librpma's example 08srq).
//!
//! `cargo run --example 08srq-simple-messages-ping-pong-with-srq [-- server ADDR PORT | client ADDR PORT seed rounds]`

mod common;
use common::pingpong::{client, server, Mode};

fn main() {
    common::main(|a| server(a, Mode::Srq), |a| client(a, Mode::Cq), &[], &["7", "3"]);
}
