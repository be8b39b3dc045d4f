//! 09-flush-to-persistent-GPSPM: the General Purpose Server Persistency Method (librpma's example 09; messages in rpma's fixed layout, see rpma::gpspm).
//!
//! `cargo run --example 09-flush-to-persistent-GPSPM [-- server ADDR PORT [pmem-path] | client ADDR PORT [word]]`

mod common;
use common::gpspm::{client, server};

fn main() {
    common::main(|a| server(a, false), |a| client(a, false), &[], &[]);
}
