//! 09-flush-to-persistent-GPSPM: the General Purpose Server Persistency Method (librpma's example 09): the client
//! writes, then asks the server to persist what it wrote with a flush
//! request (librpma's protobuf messages, see rpma::gpspm).
//!
//! `cargo run --example 09-flush-to-persistent-GPSPM [-- server ADDR PORT [pmem-path] | client ADDR PORT [pmem-path [pmem-offset]]]`

mod common;
use common::gpspm::{client, server};

fn main() {
    common::main(|a| server(a, false), |a| client(a, false), &[], &[]);
}
