//! `rpma`: what RDMA users run before writing code. `rpma devices` lists the
//! host's RDMA devices, ports, addresses and what rpma does on each;
//! `rpma serve` exposes a region (DRAM or a pmem path) and `rpma ping` /
//! `rpma bench` measure against it: round trips like rping, and the
//! workloads fio's librpma engines ran (read, write, write + flush to
//! visibility or persistence, atomic write, write + GPSPM flush request)
//! over one or several connections and threads, with IOPS, bandwidth and
//! latency percentiles.

mod bench;
mod client;
mod devices;
mod echo;
mod meta;
mod ping;
mod serve;
mod stats;

use clap::{Parser, Subcommand};
use std::time::Duration;

/// How long any one completion or connection step may take before `ping`
/// or `bench` fails (`serve` takes `--timeout`).
pub const BOUND: Duration = Duration::from_secs(10);

/// The port `serve` listens on and `ping` and `bench` connect to when none
/// is given: perftest's.
pub const DEFAULT_PORT: u16 = 18515;

/// The most operations in flight on one connection (`bench --qd`), and so
/// the GPSPM requests a served connection takes at once.
pub const MAX_QD: u32 = 512;

/// Remote persistent memory access over RDMA: discovery, a target and
/// measurements.
#[derive(Parser)]
#[command(name = "rpma", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every RDMA device: firmware, vendor and part, READs and atomics in
    /// flight, ports with state, link layer, MTUs, LIDs and GIDs with their
    /// IP addresses, and what rpma does there (native flush and atomic
    /// write, atomics, On-Demand Paging, memory windows, limits), or why
    /// the device could not be probed.
    Devices(devices::DevicesArgs),
    /// Exposes a region at ADDR:PORT to the clients that connect (`ping`,
    /// `bench`, or librpma's examples' clients), several at once, and
    /// answers their GPSPM flush requests.
    Serve(serve::ServeArgs),
    /// Round trips to a `rpma serve` target or a librpma server: RDMA reads
    /// of `--size` bytes, checked with `-V`.
    Ping(ping::PingArgs),
    /// A workload against a `rpma serve` target, as fio's librpma engines
    /// ran it.
    Bench(bench::BenchArgs),
}

fn main() {
    env_logger::init();
    let cli = Cli::parse();
    if cfg!(debug_assertions) && matches!(cli.cmd, Cmd::Ping(_) | Cmd::Bench(_)) {
        eprintln!(
            "rpma: warning: this rpma was built without optimisations; its figures are not what a release build \
             measures (install one: cargo install --path rpma-tools)"
        );
    }
    let r = match cli.cmd {
        Cmd::Devices(a) => devices::run(&a),
        Cmd::Serve(a) => serve::run(&a),
        Cmd::Ping(a) => ping::ping(&a),
        Cmd::Bench(a) => bench::run(&a),
    };
    if let Err(e) = r {
        eprintln!("rpma: {}", chain(&*e));
        std::process::exit(1);
    }
}

/// An error, then its sources (a provider's errno text), as one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        msg.push_str(&format!(": {c}"));
        cause = c.source();
    }
    msg
}

/// Every command's error: rpma's, or a message.
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;
