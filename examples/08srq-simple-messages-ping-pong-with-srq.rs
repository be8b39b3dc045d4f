//! 08srq-simple-messages-ping-pong-with-srq: the ping-pong of example 08 with a server receiving through a shared receive queue and its receive CQ (librpma's example 08srq).
//!
//! `cargo run --example 08srq-simple-messages-ping-pong-with-srq [-- server ADDR PORT | client ADDR PORT seed rounds [sleep-us]]`

mod common;
use common::pingpong::{client, server, Example, Mode};

fn main() {
    common::main(|a| server(a, Mode::Srq, Example::E08srq), |a| client(a, Mode::Cq, Example::E08srq), &[], &["7", "3"]);
}
