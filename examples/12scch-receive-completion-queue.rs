//! 12scch-receive-completion-queue: the ping-pong of example 08 with receive completion queues sharing one completion channel with the main CQ, waited on with Conn::wait (librpma's example 12scch).
//!
//! `cargo run --example 12scch-receive-completion-queue [-- server ADDR PORT | client ADDR PORT seed rounds [sleep-us]]`

mod common;
use common::pingpong::{client, server, Example, Mode};

fn main() {
    common::main(
        |a| server(a, Mode::SharedChannel, Example::E12),
        |a| client(a, Mode::SharedChannel, Example::E12),
        &[],
        &["7", "3"],
    );
}
