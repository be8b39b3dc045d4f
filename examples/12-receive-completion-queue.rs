//! 12-receive-completion-queue: the ping-pong of example 08 with separate receive completion queues (librpma's example 12).
//!
//! `cargo run --example 12-receive-completion-queue [-- server ADDR PORT | client ADDR PORT seed rounds [sleep-us]]`

mod common;
use common::pingpong::{client, server, Example, Mode};

fn main() {
    common::main(|a| server(a, Mode::Rcq, Example::E12), |a| client(a, Mode::Rcq, Example::E12), &[], &["7", "3"]);
}
