//! 09scch-flush-to-persistent-GPSPM: GPSPM with one completion channel shared by the CQ and the RCQ (librpma's example 09scch).
//!
//! `cargo run --example 09scch-flush-to-persistent-GPSPM [-- server ADDR PORT [pmem-path] | client ADDR PORT [word]]`

mod common;
use common::gpspm::{client, server};

fn main() {
    common::main(|a| server(a, true), |a| client(a, true), &[], &[]);
}
