//! 09scch-flush-to-persistent-GPSPM: GPSPM with one completion channel shared by the CQ and the receive CQ (librpma's example 09scch): the client
//! writes, then asks the server to persist what it wrote with a flush
//! request (librpma's protobuf messages, see rpma::gpspm).
//!
//! `cargo run --example 09scch-flush-to-persistent-GPSPM [-- server ADDR PORT [pmem-path] | client ADDR PORT [pmem-path [pmem-offset]]]`

mod common;
use common::gpspm::{client, server};

fn main() {
    common::main(|a| server(a, true), |a| client(a, true), &[], &[]);
}
