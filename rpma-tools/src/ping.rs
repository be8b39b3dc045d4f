//! `rpma ping`: round trips to a `rpma serve` target, as rping's.

use crate::client::{check, close, connect, peer, Target};
use crate::{Res, BOUND};
use hdrhistogram::Histogram;
use rpma::{AlignedBuf, Flags, MrLocal, Usage};
use std::time::Instant;

/// What `rpma ping` takes.
#[derive(clap::Args)]
pub struct PingArgs {
    #[command(flatten)]
    target: Target,
    /// Round trips.
    #[arg(short, long, default_value_t = 10)]
    count: u64,
    /// Bytes each read brings back.
    #[arg(long, default_value_t = 64)]
    size: usize,
}

/// Reads `--size` bytes `--count` times, printing each round trip.
pub fn ping(a: &PingArgs) -> Res<()> {
    let peer = peer(&a.target)?;
    let (conn, remote) = connect(&peer, &a.target, 1, false)?;
    if a.size == 0 || a.size as u64 > remote.size() {
        let _ = close(conn);
        return Err(format!("--size {} must be 1 to the target's {} bytes", a.size, remote.size()).into());
    }
    let dst = MrLocal::reg(&peer, AlignedBuf::new(a.size)?, Usage::READ_DST)?;
    let mut h = Histogram::<u64>::new(3)?;
    for seq in 0..a.count {
        let t = Instant::now();
        conn.read(&dst, 0, &remote, 0, a.size, Flags::COMPLETION_ALWAYS, seq)?;
        check(&conn.cq().next_completion(BOUND)?)?;
        let ns = t.elapsed().as_nanos() as u64;
        h.record(ns.max(1))?;
        println!("{} bytes from {}: seq={seq} time={:.3} ms", a.size, a.target.addr, ns as f64 / 1e6);
    }
    println!(
        "--- {} rpma ping: {} reads, min/p50/avg/p99/max = {:.3}/{:.3}/{:.3}/{:.3}/{:.3} ms",
        a.target.addr,
        h.len(),
        h.min() as f64 / 1e6,
        h.value_at_quantile(0.5) as f64 / 1e6,
        h.mean() / 1e6,
        h.value_at_quantile(0.99) as f64 / 1e6,
        h.max() as f64 / 1e6
    );
    close(conn)
}
