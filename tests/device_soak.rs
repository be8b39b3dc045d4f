//! No data lost: a client appends records to a server's file-backed log
//! (write, flush, atomic write of the commit pointer `used`, flush, as
//! example 07 does); the server (example 07 with a file) is SIGKILLed at
//! seeded random points and restarted. After every kill, every record whose
//! final flush completion the client saw is below the commit pointer and
//! intact, and nothing below the commit pointer is torn.
//!
//! Short by default; `RPMA_SOAK_ROUNDS=200` runs for minutes.

use rpma::{AlignedBuf, CommonData, ConnEvent, ConnReq, Flags, FlushType, MrLocal, Peer, Usage};
use rpma_harness::{addr, device_tests, next_port};
use std::process::{Command, Stdio};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);
// Example 07's log (librpma's layout): an 8-byte signature ("LOG" and NULs)
// at 0, the commit pointer `used` (u64 LE) at 8 (the `data_offset` the
// server sends), the data at 16; 1040 bytes.
const SIGNATURE: &[u8; 8] = b"LOG\0\0\0\0\0";
const USED_AT: u64 = 8;
const HDR: u64 = 16;
const LOG: u64 = HDR + 1024;
const REC: usize = 32;

fn record(seq: u64) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[..8].copy_from_slice(&seq.to_le_bytes());
    for (i, b) in r[8..24].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(31).wrapping_add(i as u8);
    }
    let sum = r[..24].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    r[24..].copy_from_slice(&sum.to_le_bytes());
    r
}

mod common;
use common::Rng;

/// Checks the log file; returns its commit pointer.
fn verify(path: &str, acked: &[(u64, u64)]) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() as u64 >= LOG, "the log file is {} bytes long", bytes.len());
    assert_eq!(&bytes[..8], SIGNATURE, "the log's signature");
    let used = u64::from_le_bytes(bytes[USED_AT as usize..HDR as usize].try_into().unwrap());
    assert!((HDR..=LOG).contains(&used) && (used - HDR).is_multiple_of(REC as u64), "commit pointer {used}");
    for (i, off) in (HDR..used).step_by(REC).enumerate() {
        let got = &bytes[off as usize..off as usize + REC];
        assert_eq!(got, &record(i as u64)[..], "record {i} at {off} below the commit pointer {used} is torn");
    }
    for &(seq, off) in acked {
        assert!(off + REC as u64 <= used, "record {seq} was acknowledged but is past the commit pointer {used}");
    }
    used
}

fn verify_after_kill(child: &mut std::process::Child, path: &str, acked: &[(u64, u64)]) -> u64 {
    let _ = child.kill();
    let _ = child.wait();
    verify(path, acked)
}

device_tests!({
    fn soak_kill_and_restart() {
        let rounds: usize = match std::env::var("RPMA_SOAK_ROUNDS") {
            Err(_) => 6,
            Ok(v) => v.parse().unwrap_or_else(|_| panic!("RPMA_SOAK_ROUNDS={v:?} is not a number of rounds")),
        };
        assert!(rounds > 0, "RPMA_SOAK_ROUNDS=0 would soak nothing and pass");
        let exe = std::env::current_exe().unwrap();
        let server = exe.parent().and_then(|d| d.parent()).unwrap().join("examples").join("07-atomic-write");
        let path = format!("{}/rpma-soak-{}", std::env::temp_dir().display(), std::process::id());
        let _ = std::fs::remove_file(&path);
        let peer =
            Peer::new(&rpma::device::get_ibv_context(&addr(), rpma::device::ContextType::Remote).unwrap()).unwrap();
        let mut rng = Rng(0x50a4_5eed);
        let mut acked: Vec<(u64, u64)> = Vec::new();
        let mut seq = 0u64;
        let mut kills = 0;
        let mut fresh_logs = 1;
        // A restarted server listens on the port of 16 rounds before.
        let ports: Vec<u16> = (0..16).map(|_| next_port()).collect();
        for round in 0..rounds {
            if HDR + (seq + 1) * REC as u64 > LOG {
                // The 1024-byte log is full (32 records): start a fresh one.
                std::fs::remove_file(&path).unwrap();
                acked.clear();
                seq = 0;
                fresh_logs += 1;
            }
            let p = ports[round % ports.len()];
            let mut child = Command::new(&server)
                .args(["server", &addr(), &p.to_string(), &path])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut cfg = rpma::ConnCfg::new();
            cfg.set_sq_size(16);
            cfg.set_cq_size(16);
            let conn = loop {
                let c = ConnReq::new(&peer, &addr(), p, Some(&cfg)).unwrap().connect(&[]).unwrap();
                match c.next_event_timeout(T).unwrap() {
                    ConnEvent::Established => break c,
                    _ => std::thread::sleep(Duration::from_millis(100)),
                }
            };
            let cd = CommonData::decode(conn.private_data()).unwrap();
            assert_eq!(cd.data_offset as u64, USED_AT, "example 07 sends the place of `used` as data_offset");
            assert_eq!(cd.mr.size(), LOG, "example 07's log size");
            let log = cd.mr;
            let local = MrLocal::reg(&peer, AlignedBuf::new(64).unwrap(), Usage::READ_DST | Usage::WRITE_SRC).unwrap();
            conn.read(&local, 0, &log, USED_AT, 8, Flags::COMPLETION_ALWAYS, 0).unwrap();
            assert!(conn.cq().next_completion(T).unwrap().status.is_success());
            let mut b = [0u8; 8];
            local.read_at(0, &mut b).unwrap();
            let mut used = u64::from_le_bytes(b);
            assert_eq!(used, HDR + seq * REC as u64, "the server's commit pointer after restart");
            let appends = 1 + rng.next() % 6;
            for k in 0..appends {
                if used + REC as u64 > LOG {
                    break;
                }
                local.write_at(8, &record(seq)).unwrap();
                let last = k + 1 == appends;
                let on_err = Flags::COMPLETION_ON_ERROR;
                conn.write(&log, used, &local, 8, REC, on_err, 1).unwrap();
                conn.flush(&log, used, REC as u64, FlushType::Visibility, on_err, 2).unwrap();
                conn.atomic_write(&log, USED_AT, (used + REC as u64).to_le_bytes(), on_err, 3).unwrap();
                conn.flush(&log, USED_AT, 8, FlushType::Visibility, Flags::COMPLETION_ALWAYS, 4).unwrap();
                if last && rng.next().is_multiple_of(2) {
                    // Kill with the record in flight: it may or may not land.
                    child.kill().unwrap();
                }
                let wc = conn.cq().next_completion(Duration::from_secs(3));
                match wc {
                    Ok(wc) if wc.status.is_success() => {
                        acked.push((seq, used));
                        used += REC as u64;
                        seq += 1;
                    }
                    _ => {
                        // Not acknowledged (it may still have landed completely:
                        // the file, checked below, decides where the log goes on).
                        kills += 1;
                        break;
                    }
                }
            }
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap(); // killed between appends
                kills += 1;
            }
            conn.disconnect().ok();
            drop(conn);
            let used_now = verify_after_kill(&mut child, &path, &acked);
            seq = (used_now - HDR) / REC as u64;
        }
        println!(
        "  {rounds} rounds, {kills} kills, {fresh_logs} log file(s), {} acknowledged records in the last, all present and intact",
        acked.len()
    );
        let _ = std::fs::remove_file(&path);
    }
});
