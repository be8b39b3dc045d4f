//! What a `rpma bench` client asks a served connection for beyond the
//! region, and the server's side of the ping-pongs perftest's latency tests
//! time (`ib_write_lat`, `ib_send_lat`).
//!
//! The ask is text in the connection's private data, after
//! [`EXPORT`](crate::serve::EXPORT): receives for GPSPM requests
//! (`rpma-gpspm qd=N`), receives for sends (`rpma-send size=N qd=Q`, with
//! ` echo` each answered by a send of the same bytes), or a buffer of the
//! connection's own whose writes are answered by writes
//! (`rpma-write-echo size=N`). A client that asks for nothing (librpma's)
//! gets one GPSPM receive.
//!
//! The write ping-pong, as `ib_write_lat`'s: the client's buffer's
//! descriptor is its first message, and a `size=N` message sets the bytes
//! each ping writes; the server answers each message with the same bytes
//! once it applied it. Then it busy-polls the last of those bytes in its
//! buffer and, each time it changes, writes the bytes back to the client's
//! buffer, whose last byte the client polls.

use crate::serve::GPSPM_QD;
use crate::{Res, MAX_QD};
use rpma::messages::{Messages, Slot};
use rpma::utils::poll_fds;
use rpma::{CommonData, Completion, Conn, ConnEvent, Cq, Flags, MrLocal, MrRemote, WcStatus};
use std::os::fd::AsFd;
use std::time::Duration;

/// What a connection asks for beyond the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// `qd` receives for GPSPM flush requests.
    Gpspm { qd: u32 },
    /// `qd` receives of `size` bytes for the client's sends; with `echo`
    /// each is answered with a send of the same bytes.
    Send { size: usize, qd: u32, echo: bool },
    /// A buffer of `size` bytes of the connection's own, whose writes are
    /// answered by writes.
    WriteEcho { size: usize },
}

/// The most bytes an ask may make the server register for one connection.
pub const ECHO_MAX: usize = 64 << 20;

/// Whether `qd` receives or buffers of `size` bytes each stay within
/// [`ECHO_MAX`]: checked by a client before it asks, and by the server on
/// the ask.
pub fn within_max(size: u64, qd: u64) -> bool {
    size.checked_mul(qd).is_some_and(|n| n <= ECHO_MAX as u64)
}

const SEND: &str = "rpma-send ";
const WRITE_ECHO: &str = "rpma-write-echo ";

impl Ask {
    /// The text to put after [`EXPORT`](crate::serve::EXPORT).
    pub fn encode(&self) -> String {
        match *self {
            Ask::Gpspm { qd } => format!("{GPSPM_QD}{qd}"),
            Ask::Send { size, qd, echo } => format!("{SEND}size={size} qd={qd}{}", if echo { " echo" } else { "" }),
            Ask::WriteEcho { size } => format!("{WRITE_ECHO}size={size}"),
        }
    }

    /// The ask in a connection request's private data (after the export
    /// request, if any); private data that asks for nothing known asks for
    /// one GPSPM receive. An ask the server cannot meet is an error.
    pub fn decode(pdata: &[u8]) -> Result<Ask, String> {
        let s = std::str::from_utf8(pdata).unwrap_or_default().trim_end_matches('\0');
        let s = s.strip_prefix(crate::serve::EXPORT).unwrap_or(s);
        if let Some(q) = s.strip_prefix(GPSPM_QD) {
            return Ok(Ask::Gpspm { qd: q.parse().unwrap_or(1).clamp(1, MAX_QD) });
        }
        let field = |rest: &str, key: &str| -> Result<u64, String> {
            rest.split(' ')
                .find_map(|f| f.strip_prefix(key))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("the ask {s:?} has no number {key}"))
        };
        let size_of = |rest: &str, qd: u64| -> Result<usize, String> {
            let size = field(rest, "size=")?;
            match size > 0 && within_max(size, qd) {
                true => Ok(size as usize),
                false => Err(format!("{s:?}: 1 to {ECHO_MAX} bytes of receives or buffer")),
            }
        };
        if let Some(rest) = s.strip_prefix(SEND) {
            let qd = field(rest, "qd=")?;
            if !(1..=u64::from(MAX_QD)).contains(&qd) {
                return Err(format!("{s:?}: qd 1 to {MAX_QD}"));
            }
            let echo = rest.split(' ').any(|f| f == "echo");
            return Ok(Ask::Send { size: size_of(rest, qd)?, qd: qd as u32, echo });
        }
        if let Some(rest) = s.strip_prefix(WRITE_ECHO) {
            return Ok(Ask::WriteEcho { size: size_of(rest, 1)? });
        }
        Ok(Ask::Gpspm { qd: 1 })
    }

    /// What the server counts for the ask, as its text says it.
    pub fn answers(&self) -> &'static str {
        match self {
            Ask::Gpspm { .. } => "GPSPM flush requests answered",
            Ask::Send { echo: false, .. } => "sends received",
            Ask::Send { echo: true, .. } => "sends echoed",
            Ask::WriteEcho { .. } => "writes echoed",
        }
    }

    /// The message slots the server registers for the ask: `min` bytes
    /// at least (the descriptor's and the GPSPM messages' size). Streamed
    /// sends get up to twice their depth in receives, so that a receive is
    /// posted again before a send needs it (a send finding none waits the
    /// RNR timer), and no send slots.
    pub fn slots(&self, min: usize) -> Slots {
        match *self {
            Ask::Gpspm { qd } => Slots { recvs: qd as usize, sends: qd as usize, size: min },
            Ask::Send { size, qd, echo: true } => Slots { recvs: qd as usize, sends: qd as usize, size: size.max(min) },
            Ask::Send { size, qd, echo: false } => {
                let n = ((2 * qd).min(MAX_QD) as usize).min(ECHO_MAX / size).max(qd as usize);
                Slots { recvs: n, sends: 0, size: size.max(min) }
            }
            Ask::WriteEcho { .. } => Slots { recvs: 1, sends: 1, size: min },
        }
    }
}

/// The message slots of a served connection: receives, sends for the
/// answers (the descriptor gets one more) and their size.
#[derive(Debug, PartialEq, Eq)]
pub struct Slots {
    pub recvs: usize,
    pub sends: usize,
    pub size: usize,
}

/// The op context of the server's echoing write.
const ECHO_WRITE: u64 = 1;

/// Empty polls before the server sleeps between polls (1 ms each): an
/// idle client costs no core, a pinging one no wake-up.
pub const SPINS: u32 = 1 << 17;

/// Whether `conn`'s next event (the client's close) is there after waiting
/// for it `idle`-dependently: not at all while spinning (checked every 1024
/// polls), 1 ms once idle for [`SPINS`] polls.
pub fn closed(conn: &Conn, idle: u32) -> Res<Option<ConnEvent>> {
    if idle < SPINS && !idle.is_multiple_of(1024) {
        std::hint::spin_loop();
        return Ok(None);
    }
    let wait = if idle < SPINS { Duration::ZERO } else { Duration::from_millis(1) };
    match poll_fds(&[conn.as_fd()], Some(wait))?[0] {
        true => Ok(Some(conn.next_event()?)),
        false => Ok(None),
    }
}

/// What a served connection's completion `wc` says: `Some` event when the
/// client closed the connection (its disconnect flushes the posted
/// receives), an error when an operation failed, `None` for one to take.
pub fn ended(conn: &Conn, wc: &Completion, timeout: Duration) -> Res<Option<ConnEvent>> {
    if wc.status == WcStatus::WR_FLUSH_ERR {
        match conn.next_event_timeout(timeout) {
            Ok(ev) if ev != ConnEvent::Established => return Ok(Some(ev)),
            _ => {}
        }
    }
    if !wc.status.is_success() {
        return Err(format!("{:?} failed: {}", wc.op, wc.status).into());
    }
    Ok(None)
}

/// Answers a write ping-pong on `conn` (see the module's docs) until the
/// client's close; returns it and the count of writes answered. `pp` is
/// the connection's buffer; `msgs` has receive slot 0 posted and send slot
/// 0 for the answers.
pub fn echo_writes<M: rpma::RegMemory + Send + Sync + 'static>(
    conn: &Conn,
    msgs: &mut Messages,
    pp: &MrLocal<M>,
    timeout: Duration,
) -> Res<(ConnEvent, u64)> {
    let cq = conn.cq();
    let mut client: Option<MrRemote> = None;
    let (mut size, mut last, mut echoed) = (0usize, 0u8, 0u64);
    // An echo write, an answer in flight; a message received, not applied.
    let (mut writing, mut answering, mut pending) = (false, false, None);
    let mut wcs = [Cq::EMPTY; 8];
    let mut idle = 0u32;
    loop {
        let mut busy = false;
        if let Some(c) = client.as_ref().filter(|_| size > 0 && !writing) {
            let mut b = [0u8];
            pp.read_at(size - 1, &mut b)?;
            if b[0] != last {
                last = b[0];
                conn.write(c, 0, pp, 0, size, Flags::COMPLETION_ALWAYS, ECHO_WRITE)?;
                (writing, busy) = (true, true);
                echoed += 1;
            }
        }
        let n = cq.get_wc(&mut wcs)?;
        for wc in &wcs[..n] {
            busy = true;
            if let Some(ev) = ended(conn, wc, timeout)? {
                return Ok((ev, echoed));
            }
            match (wc.op_context, msgs.slot(wc)) {
                (ECHO_WRITE, _) => writing = false,
                (_, Some(Slot::Send(0))) => answering = false,
                // The descriptor's slot.
                (_, Some(Slot::Send(_))) => {}
                (_, Some(Slot::Recv(0))) => pending = Some(wc.byte_len as usize),
                _ => return Err(format!("a completion of nothing posted here: {wc:?}").into()),
            }
        }
        // A message is applied once no echo is in flight (a size changes
        // what an echo writes) and answered once the last answer is sent.
        if let Some(len) = pending.filter(|_| !writing && !answering) {
            pending = None;
            let msg = msgs.received(0, len)?;
            msgs.post_recv(conn, 0)?;
            if client.is_none() {
                let cd = CommonData::decode(&msg).map_err(|e| format!("the client's buffer's descriptor: {e}"))?;
                client = Some(cd.mr);
            } else {
                size = std::str::from_utf8(&msg)
                    .ok()
                    .and_then(|m| m.strip_prefix("size="))
                    .and_then(|n| n.parse().ok())
                    .filter(|&n| n > 0 && n <= pp.size())
                    .ok_or_else(|| format!("the client's message {msg:?} is no size=N of 1 to {}", pp.size()))?;
                // The client's next ping sets it to a value other than 0.
                pp.write_at(size - 1, &[0])?;
                last = 0;
            }
            msgs.send(conn, 0, &msg, Flags::COMPLETION_ALWAYS)?;
            (answering, busy) = (true, true);
        }
        if busy {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if let Some(ev) = closed(conn, idle)? {
            return Ok((ev, echoed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_round_trip_and_bad_ones_are_refused() {
        for ask in [
            Ask::Gpspm { qd: 128 },
            Ask::Send { size: 4096, qd: 16, echo: false },
            Ask::Send { size: 8, qd: 1, echo: true },
            Ask::WriteEcho { size: 8 << 20 },
        ] {
            let text = format!("{}{}", crate::serve::EXPORT, ask.encode());
            assert!(text.len() <= 56, "{text} fits the private data");
            assert_eq!(Ask::decode(text.as_bytes()), Ok(ask));
            assert_eq!(Ask::decode(ask.encode().as_bytes()), Ok(ask), "without the export request");
        }
        let mut pdata = [0u8; 56];
        pdata[..17].copy_from_slice(b"rpma-gpspm qd=128");
        assert_eq!(Ask::decode(&pdata), Ok(Ask::Gpspm { qd: 128 }));
        assert_eq!(Ask::decode(b"rpma-gpspm qd=100000"), Ok(Ask::Gpspm { qd: MAX_QD }));
        assert_eq!(Ask::decode(b"rpma-gpspm qd=0"), Ok(Ask::Gpspm { qd: 1 }));
        for other in [&b""[..], b"rpma-gpspm qd=x", b"\xff\xfe", &[0u8; 56], b"librpma's own"] {
            assert_eq!(Ask::decode(other), Ok(Ask::Gpspm { qd: 1 }), "{other:?}");
        }
        for bad in [
            &b"rpma-send size=0 qd=1"[..],
            b"rpma-send size=8 qd=0",
            b"rpma-send size=8 qd=513",
            b"rpma-send size=67108864 qd=2",
            b"rpma-send size=18446744073709551615 qd=2",
            b"rpma-send qd=2",
            b"rpma-write-echo size=67108865",
            b"rpma-write-echo size=x",
        ] {
            assert!(Ask::decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let slots = |ask: Ask| {
            let s = ask.slots(512);
            (s.recvs, s.sends, s.size)
        };
        assert_eq!(slots(Ask::Send { size: 8, qd: 4, echo: true }), (4, 4, 512));
        assert_eq!(slots(Ask::Send { size: 8, qd: 4, echo: false }), (8, 0, 512));
        assert_eq!(slots(Ask::Send { size: 8, qd: 512, echo: false }), (512, 0, 512));
        assert_eq!(slots(Ask::Send { size: 1 << 20, qd: 64, echo: false }), (64, 0, 1 << 20));
        assert_eq!(slots(Ask::WriteEcho { size: 4096 }), (1, 1, 512));
        assert_eq!(slots(Ask::Gpspm { qd: 3 }), (3, 3, 512));
    }

    #[test]
    fn within_max_is_the_one_rule_of_size_times_depth() {
        let max = ECHO_MAX as u64;
        assert!(within_max(max / 512, 512));
        assert!(within_max(max, 1));
        assert!(!within_max(max / 512 + 1, 512));
        assert!(!within_max(u64::MAX, 2), "an overflowing product is refused, not wrapped");
        // The client's check and the server's agree at the edge.
        assert!(Ask::decode(format!("rpma-send size={} qd=512", max / 512).as_bytes()).is_ok());
        assert!(Ask::decode(format!("rpma-send size={} qd=512", max / 512 + 1).as_bytes()).is_err());
    }
}
