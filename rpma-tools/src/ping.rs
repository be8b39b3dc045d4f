//! `rpma ping`: round trips to a target, as rping's: `rpma serve`, or a
//! librpma server that puts its region's descriptor in the private data.

use crate::client::{check, close, connect_any, peer, Target, DESC_CONTEXT};
use crate::meta::{Json, Meta};
use crate::stats::Latency;
use crate::{Res, BOUND};
use rpma::{AlignedBuf, Conn, Flags, MrLocal, MrRemote, Peer, Usage};
use serde::Serialize;
use std::time::{Duration, Instant, SystemTime};

/// What `rpma ping` takes.
#[derive(clap::Args, Serialize)]
pub struct PingArgs {
    #[command(flatten)]
    target: Target,
    /// Round trips.
    #[arg(short, long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// Bytes each read brings back (at most the target's region).
    #[arg(short = 'S', long, default_value_t = 64)]
    size: usize,
    /// Seconds to wait between round trips.
    #[arg(short, long, default_value_t = 0.0)]
    interval: f64,
    /// Check the bytes every read returns (rping's -V): before each read an
    /// RDMA write puts that round's pattern in the first --size bytes of
    /// the target's region; a region that takes no remote writes is read
    /// once, and every read must return those bytes again. A mismatch
    /// fails, naming the round and the offset.
    #[arg(short = 'V', long)]
    validate: bool,
    /// One JSON object on stdout (perftest's latency keys, in
    /// microseconds), instead of a line per round trip.
    #[arg(long)]
    json: bool,
}

/// The op context of the reference read and of the pattern's writes (the
/// reads' are their round numbers).
const REFERENCE: u64 = u64::MAX - 1;
const PATTERN: u64 = u64::MAX - 2;

/// Reads `--size` bytes `--count` times, printing each round trip (or, with
/// `--json`, the statistics alone).
pub fn ping(a: &PingArgs) -> Res<()> {
    if !a.interval.is_finite() || a.interval < 0.0 {
        return Err(format!("--interval {} must be 0 or more seconds", a.interval).into());
    }
    let started = SystemTime::now();
    let peer = peer(&a.target)?;
    let (conn, remote) = connect_any(&peer, &a.target)?;
    let r = rounds(a, &peer, &conn, &remote);
    let closed = close(conn);
    let (us, validated) = r?;
    closed?;
    let s = Latency::of(&us).ok_or("no round trips")?;
    if a.json {
        let result = Report { msg_size: a.size, n_iterations: s.n, validated, stats: s };
        let mut meta = Meta::new(started, a);
        meta.device = Some(peer.device_name());
        meta.address = Some(&a.target.addr);
        meta.port = Some(a.target.port());
        println!("{}", serde_json::to_string(&Json { meta, result })?);
        return Ok(());
    }
    let ms = |us: f64| us / 1e3;
    println!(
        "--- {} rpma ping: {} reads{}, min/typical/avg/max/stdev = {:.3}/{:.3}/{:.3}/{:.3}/{:.3} ms, \
         p99/p99.9 = {:.3}/{:.3} ms",
        a.target.addr,
        s.n,
        if validated { ", every one validated" } else { "" },
        ms(s.t_min),
        ms(s.t_typical),
        ms(s.t_avg),
        ms(s.t_max),
        ms(s.t_stdev),
        ms(s.percentile_99),
        ms(s.percentile_99_9)
    );
    Ok(())
}

/// The round trips, in microseconds, and whether their bytes were checked.
fn rounds(a: &PingArgs, peer: &Peer, conn: &Conn, remote: &MrRemote) -> Res<(Vec<f64>, bool)> {
    if a.size == 0 || a.size as u64 > remote.size() {
        return Err(format!("--size {} must be 1 to the target's {} bytes", a.size, remote.size()).into());
    }
    let dst = MrLocal::reg(peer, AlignedBuf::new(a.size)?, Usage::READ_DST)?;
    let src = match a.validate && remote.usage().contains(Usage::WRITE_DST) {
        true => Some(MrLocal::reg(peer, AlignedBuf::new(a.size)?, Usage::WRITE_SRC)?),
        false => None,
    };
    let mut expect = vec![0u8; a.size];
    if a.validate && src.is_none() {
        conn.read(&dst, 0, remote, 0, a.size, Flags::COMPLETION_ALWAYS, REFERENCE)?;
        wait(conn, REFERENCE)?;
        dst.read_at(0, &mut expect)?;
        if !a.json {
            println!("the region takes no remote writes: every read must return its first {} bytes", a.size);
        }
    }
    let mut got = vec![0u8; a.size];
    let mut us = Vec::with_capacity(a.count.min(1 << 20) as usize);
    for seq in 0..a.count {
        if seq > 0 && a.interval > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(a.interval));
        }
        if let Some(src) = &src {
            expect = pattern(seq, a.size);
            src.write_at(0, &expect)?;
            conn.write(remote, 0, src, 0, a.size, Flags::COMPLETION_ALWAYS, PATTERN)?;
            wait(conn, PATTERN)?;
        }
        if a.validate {
            // A read that brought nothing would leave these, never the
            // expected bytes.
            dst.write_at(0, &expect.iter().map(|b| !b).collect::<Vec<_>>())?;
        }
        let t = Instant::now();
        conn.read(&dst, 0, remote, 0, a.size, Flags::COMPLETION_ALWAYS, seq)?;
        wait(conn, seq)?;
        let ns = t.elapsed().as_nanos() as f64;
        us.push(ns / 1e3);
        if a.validate {
            dst.read_at(0, &mut got)?;
            if let Some(why) = mismatch(seq, &got, &expect) {
                return Err(why.into());
            }
        }
        if !a.json {
            println!("{} bytes from {}: seq={seq} time={:.3} ms", a.size, a.target.addr, ns / 1e6);
        }
    }
    Ok((us, a.validate))
}

/// What `-V` says when round `seq` read `got` where `expect` was written:
/// the first byte that differs, or `None`.
fn mismatch(seq: u64, got: &[u8], expect: &[u8]) -> Option<String> {
    let offset = got.iter().zip(expect).position(|(g, e)| g != e)?;
    Some(format!(
        "validation failed: round seq={seq} read {:#04x} at offset {offset}, {:#04x} expected",
        got[offset], expect[offset]
    ))
}

/// Round `seq`'s bytes: printable ASCII, shifted by one each round.
fn pattern(seq: u64, size: usize) -> Vec<u8> {
    (0..size as u64).map(|i| b'!' + ((seq + i) % 94) as u8).collect()
}

/// Waits for the completion of `op_context`, passing over the descriptor's
/// message (`rpma serve` sends it as well as its private data).
fn wait(conn: &Conn, op_context: u64) -> Res<()> {
    loop {
        let wc = conn.cq().next_completion(BOUND)?;
        if wc.op_context == DESC_CONTEXT {
            continue;
        }
        check(&wc)?;
        if wc.op_context != op_context {
            return Err(format!("a completion of {:#x} while waiting for {op_context:#x}", wc.op_context).into());
        }
        return Ok(());
    }
}

/// `--json`'s figures, perftest's keys.
#[derive(Serialize)]
struct Report {
    #[serde(rename = "MsgSize")]
    msg_size: usize,
    n_iterations: usize,
    /// Whether every read's bytes were checked (`--validate`).
    validated: bool,
    #[serde(flatten)]
    stats: Latency,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_has_its_own_pattern() {
        let (a, b) = (pattern(0, 200), pattern(1, 200));
        assert!(a.iter().chain(&b).all(|c| c.is_ascii_graphic()));
        assert!(a.iter().zip(&b).all(|(x, y)| x != y));
        assert_eq!(&a[1..], &b[..199]);
    }

    #[test]
    fn a_mismatch_names_the_round_the_offset_and_both_bytes() {
        let expect = pattern(3, 16);
        assert_eq!(mismatch(3, &expect, &expect), None);
        let mut got = expect.clone();
        got[9] = 0;
        let why = mismatch(3, &got, &expect).unwrap();
        assert_eq!(why, format!("validation failed: round seq=3 read 0x00 at offset 9, {:#04x} expected", expect[9]));
        // A read that brought nothing leaves the complement (see `rounds`).
        let none: Vec<u8> = expect.iter().map(|b| !b).collect();
        assert!(mismatch(3, &none, &expect).unwrap().contains("at offset 0,"));
    }
}
