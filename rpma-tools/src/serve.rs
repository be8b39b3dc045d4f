//! `rpma serve`: a region at an address, for `ping`, `bench` or librpma's
//! examples' clients, several at once, each connection on its own thread.
//! Each connection also answers GPSPM flush requests (librpma's example 09,
//! fio's librpma_gpspm engine): it persists the range (a `--pmem` mapping)
//! and sends the response.
//!
//! By default the region is served librpma's way: registered with remote
//! access, its descriptor in every connection's private data (and as the
//! first message to clients that ask for it, [`EXPORT`]). With `--isolate`
//! it is exported to each connection alone (`Conn::export`, a type 2 memory
//! window on its queue pair) and has no remote access of its own; the
//! descriptor goes as the first message, and clients that do not ask for
//! it (librpma's) are refused.
//!
//! At most `--max-conns` connections are served at once: a request beyond
//! them is rejected (the client sees its connection refused) and said so.

use crate::echo::{self, echo_writes, Ask, Slots};
use crate::meta::{Json, Meta};
use crate::{Res, MAX_QD};
use rpma::device::{get_ibv_context, ContextType};
use rpma::export::Export;
use rpma::gpspm::{FlushRequest, FlushResponse};
use rpma::messages::{Messages, MsgAccess, Slot};
use rpma::utils::poll_fds;
use rpma::{AlignedBuf, CommonData, Conn, ConnCfg, ConnEvent, ConnReq, Ep, Flags, MappedFile, MrLocal, Peer};
use rpma::{MwAccess, PeerCfg, Usage};
use serde::Serialize;
use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// How a `rpma bench --workload gpspm` client asks for as many receives as
/// it keeps requests in flight: its connection's private data is this
/// prefix and the count in decimal. Without it a connection gets one
/// receive (librpma's example 09 sends one request at a time). The other
/// asks are [`Ask`]'s.
pub const GPSPM_QD: &str = "rpma-gpspm qd=";

/// How a client (`rpma ping`, `rpma bench`) says it takes the region's
/// descriptor as the connection's first message: its private data starts
/// with this, then [`GPSPM_QD`] when it asks for receives. It posts that
/// message's receive before connecting.
pub const EXPORT: &str = "rpma-export ";

/// The largest GPSPM message taken (librpma's example's `MSG_SIZE_MAX`): a
/// protobuf peer may add fields to the 27-byte request.
pub const MSG_SIZE: usize = 512;

/// What `rpma serve` takes.
#[derive(clap::Args, Serialize)]
pub struct ServeArgs {
    /// The address to listen on: one an RDMA device has (`rpma devices`).
    addr: String,
    /// The port (perftest's 18515 unless given here or as `-p`).
    #[arg(value_name = "PORT", default_value_t = crate::DEFAULT_PORT)]
    port_arg: u16,
    /// The port, as perftest's `-p` (instead of PORT).
    #[arg(short = 'p', long = "port", value_name = "PORT", conflicts_with = "port_arg")]
    port_flag: Option<u16>,
    /// The region's size in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    size: usize,
    /// Serve the first `--size` bytes of this file or device DAX instead of
    /// DRAM (then the persistent flush is offered, `direct_write_to_pmem`
    /// where the mapping is persistent memory, and GPSPM flush requests
    /// persist the mapping). Nothing else may truncate it while it is
    /// served.
    #[arg(long)]
    pmem: Option<PathBuf>,
    /// Serve this many connections to their end, then exit (default: until
    /// killed); the exit status says whether any connection failed.
    /// Connections that failed or were refused do not count.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Serve at most this many connections at once: a request beyond them
    /// is refused (rejected), and the refusal printed.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    max_conns: u64,
    /// Seconds a connection's establishment, or its close once the client's
    /// receives are flushed, may take before the connection fails.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// JSON Lines on stdout: one object when serving starts, one per
    /// connection request once its connection ends (served, failed or
    /// refused), one summary after the --count connections (the text goes
    /// to stderr).
    #[arg(long)]
    json: bool,
    /// Export the region to each connection alone (a type 2 memory window
    /// on its queue pair; the region itself has no remote access), its
    /// descriptor sent as the connection's first message: no connection
    /// reaches the region with another's rkey. `rpma ping` and `rpma bench`
    /// take it; librpma's clients, which expect the descriptor in the
    /// private data, are refused. By default the region is served
    /// librpma's way: one registration with remote access, which any
    /// connection holding or guessing its rkey reaches.
    #[arg(long)]
    isolate: bool,
}

/// The served region: DRAM, or the file `--pmem` names.
type Region = MrLocal<rpma::Memory>;

/// The whole region, to `conn` alone: read, write, atomics.
fn export(region: &Region, conn: &Conn) -> rpma::Result<Export> {
    let access = MwAccess::REMOTE_READ | MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC;
    conn.export(region, 0, region.size(), access)
}

/// What a GPSPM flush request asks for, its range checked against the
/// region: a file mapping's range is persisted (a CPU cache flush on
/// persistent memory, `msync` elsewhere). For DRAM there is nothing to
/// persist beyond the write having landed, as in librpma's example 09
/// server.
fn persist(region: &Region, req: &FlushRequest) -> rpma::Result<()> {
    req.check(region.size() as u64)?;
    // In range: `check` bounded both by the region's size.
    region.persist_range(req.offset as usize, req.length as usize)
}

impl ServeArgs {
    /// The port: `-p`'s, else PORT's.
    fn port(&self) -> u16 {
        self.port_flag.unwrap_or(self.port_arg)
    }
}

/// Serves until killed, or until `--count` connections were served to
/// their end: then fails if any connection failed.
pub fn run(a: &ServeArgs) -> Res<()> {
    let started = SystemTime::now();
    let timeout = match a.timeout {
        t if t.is_finite() && t > 0.0 && t <= 1e9 => Duration::from_secs_f64(t),
        t => return Err(format!("--timeout {t} must be more than 0 seconds").into()),
    };
    let peer = Peer::new(&get_ibv_context(&a.addr, ContextType::Local)?)?;
    let exports = a.isolate;
    if exports && !peer.capabilities().mw_type2 {
        return Err(format!(
            "--isolate: {} has no type 2 memory windows, which tie a window to one connection",
            peer.device_name()
        )
        .into());
    }
    // Exported, the region has no remote access of its own (MW_BIND lets
    // windows be bound over it, WRITE_SRC gives the local write access a
    // writable window needs); the exports offer what the memory allows.
    let mut usage = if exports {
        Usage::MW_BIND | Usage::WRITE_SRC
    } else {
        Usage::READ_SRC | Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY
    };
    let mut pcfg = PeerCfg::new();
    let (region, pdata, what) = match &a.pmem {
        Some(path) => {
            if !exports {
                usage |= Usage::FLUSH_TYPE_PERSISTENT;
            }
            // SAFETY: the user names a file that nothing else truncates or
            // remaps while it is served (`--pmem`'s documented contract).
            let f = unsafe { MappedFile::open(path, a.size) }?;
            pcfg.set_direct_write_to_pmem(f.is_pmem());
            let pmem = if f.is_pmem() { "persistent memory" } else { "not persistent memory" };
            let mr = MrLocal::reg(&peer, rpma::Memory::Mapped(f), usage)?;
            let pdata = CommonData::encode(0, &mr, Some(&pcfg));
            (mr, pdata, format!("{} ({pmem})", path.display()))
        }
        None => {
            let mr = MrLocal::reg(&peer, rpma::Memory::Dram(AlignedBuf::new(a.size)?), usage)?;
            let pdata = CommonData::encode(0, &mr, Some(&pcfg));
            (mr, pdata, "DRAM".to_string())
        }
    };
    let ep = Ep::listen(&peer, &a.addr, a.port())?;
    let persistent = usage.contains(Usage::FLUSH_TYPE_PERSISTENT) || (exports && region.is_pmem());
    let out = Out { json: a.json };
    out.say(format!(
        "serving {} bytes of {what} at {}:{} ({}; flush: {}; direct_write_to_pmem: {}; GPSPM: {})",
        a.size,
        a.addr,
        a.port(),
        if exports { "exported to each connection alone" } else { "shared by every connection" },
        if persistent { "persistent, visibility" } else { "visibility" },
        pcfg.direct_write_to_pmem(),
        if a.pmem.is_some() { "persists the mapping" } else { "nothing to persist in DRAM" }
    ));
    let meta = || {
        let mut m = Meta::new(started, a);
        m.device = Some(peer.device_name());
        m.address = Some(&a.addr);
        m.port = Some(a.port());
        m
    };
    if a.json {
        let result = Start { event: "serving", memory: &what, persistent_flush: persistent };
        out.json(&Json { meta: meta(), result });
    }
    // Queues for the deepest GPSPM client: the request's private data comes
    // with it, after its queues are made.
    let mut cfg = ConnCfg::new();
    cfg.set_sq_size(MAX_QD + 1);
    cfg.set_rq_size(MAX_QD);
    cfg.set_cq_size(2 * MAX_QD + 1);
    let t = &Tally::default();
    let mut n = 0u64;
    // Endpoint errors in a row: a broken endpoint ends the run.
    let mut broken = 0;
    std::thread::scope(|s| {
        while a.count.is_none_or(|c| t.get().served < c) {
            // Bounded, to see the count reached by the last connection.
            let req = match ep.next_conn_req_timeout(Some(&cfg), Duration::from_millis(200)) {
                Err(rpma::Error::NoEvent) => continue,
                r => r,
            };
            n += 1;
            let req = match req {
                Ok(req) => req,
                Err(e) => {
                    out.end(n, t, Err(e.into()), false);
                    broken += 1;
                    if broken == 100 {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            broken = 0;
            let now = t.get();
            let full = if now.active >= a.max_conns {
                Some(format!("{} connections served at once already (--max-conns {})", now.active, a.max_conns))
            } else {
                a.count
                    .filter(|&c| now.served + now.active >= c)
                    .map(|c| format!("the last of the --count {c} are being served"))
            };
            if let Some(why) = full {
                // Dropped, the request is rejected.
                drop(req);
                t.update(|c| c.refused += 1);
                out.refused(n, &why);
                continue;
            }
            t.update(|c| c.active += 1);
            let (peer, region, pdata) = (&peer, &region, &pdata);
            let how = Serving { exports, pcfg: &pcfg, timeout, out };
            let spawned = std::thread::Builder::new().spawn_scoped(s, move || {
                out.end(n, t, serve(n, req, peer, region, pdata, how), true);
            });
            if let Err(e) = spawned {
                out.end(n, t, Err(e.into()), true);
            }
        }
    });
    let Counts { served, failed, refused, .. } = t.get();
    if a.json {
        let result = Summary { event: "summary", requests: n, served, failed, refused };
        out.json(&Json { meta: meta(), result });
    }
    if broken == 100 {
        return Err(format!("the endpoint failed {broken} times in a row ({served} connections served)").into());
    }
    match failed {
        0 => Ok(()),
        f => Err(format!("{f} of the {n} connection requests failed ({served} served, {refused} refused)").into()),
    }
}

/// What became of the connection requests, updated under one lock so that
/// a connection leaves `active` as it is counted.
#[derive(Default)]
struct Tally(Mutex<Counts>);

#[derive(Default, Clone, Copy)]
struct Counts {
    /// Served to their end.
    served: u64,
    failed: u64,
    /// Refused by `--max-conns` or `--count`.
    refused: u64,
    /// Being served.
    active: u64,
}

impl Tally {
    fn get(&self) -> Counts {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// Where `serve` says what happens: text on stdout, or with `--json` JSON
/// Lines on stdout and the text on stderr. Errors and refusals go to
/// stderr.
#[derive(Clone, Copy)]
struct Out {
    json: bool,
}

impl Out {
    fn say(self, line: String) {
        match self.json {
            true => eprintln!("{line}"),
            false => println!("{line}"),
        }
    }

    fn json<T: Serialize>(self, v: &T) {
        match serde_json::to_string(v) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("rpma: JSON: {e}"),
        }
    }

    /// Connection request `n` is done with: served (how it closed, GPSPM
    /// requests answered) or failed; `active` when it was being served.
    fn end(self, n: u64, t: &Tally, r: Res<Served>, active: bool) {
        t.update(|c| {
            c.active -= u64::from(active);
            match &r {
                Ok(_) => c.served += 1,
                Err(_) => c.failed += 1,
            }
        });
        let rec = match r {
            Ok(sv) => {
                match sv.answered {
                    0 => self.say(format!("connection {n}: {}", sv.closed)),
                    k => self.say(format!("connection {n}: {} ({k} {})", sv.closed, sv.ask.answers())),
                }
                let counts = Counted::of(sv.ask, sv.answered);
                Record { event: "connection", conn: n, outcome: "served", closed: Some(sv.closed), counts, error: None }
            }
            Err(e) => {
                let e = crate::chain(&*e);
                eprintln!("connection {n}: {e}");
                let counts = Counted::default();
                Record { event: "connection", conn: n, outcome: "failed", closed: None, counts, error: Some(e) }
            }
        };
        if self.json {
            self.json(&rec);
        }
    }

    /// Connection request `n` was refused.
    fn refused(self, n: u64, why: &str) {
        eprintln!("connection {n}: refused: {why}");
        if self.json {
            let error = Some(why.to_string());
            let counts = Counted::default();
            self.json(&Record { event: "connection", conn: n, outcome: "refused", closed: None, counts, error });
        }
    }
}

/// `--json`'s first line (after [`Meta`]'s fields).
#[derive(Serialize)]
struct Start<'a> {
    event: &'static str,
    /// `DRAM`, or the `--pmem` path and whether it is persistent memory.
    memory: &'a str,
    /// Whether the persistent flush is offered.
    persistent_flush: bool,
}

/// `--json`'s line for a connection request, once it is done with.
#[derive(Serialize)]
struct Record {
    event: &'static str,
    /// The request's number, from 1.
    conn: u64,
    /// `served` (to its end), `failed` or `refused`.
    outcome: &'static str,
    /// How it ended, when served (the client's close: `Connection closed`).
    closed: Option<String>,
    #[serde(flatten)]
    counts: Counted,
    /// Why it failed or was refused.
    error: Option<String>,
}

/// What a served connection asked for and got, by kind.
#[derive(Serialize, Default)]
struct Counted {
    /// GPSPM flush requests answered.
    gpspm_answered: u64,
    /// Sends received (a `bench -w send` client's).
    sends_received: u64,
    /// Ping-pong answers: sends or writes (`bench --pingpong`).
    echoed: u64,
}

impl Counted {
    fn of(ask: Ask, n: u64) -> Counted {
        match ask {
            Ask::Gpspm { .. } => Counted { gpspm_answered: n, ..Counted::default() },
            Ask::Send { echo, .. } => {
                Counted { sends_received: n, echoed: if echo { n } else { 0 }, ..Counted::default() }
            }
            Ask::WriteEcho { .. } => Counted { echoed: n, ..Counted::default() },
        }
    }
}

/// `--json`'s last line, after [`Meta`]'s fields (with `--count`).
#[derive(Serialize)]
struct Summary {
    event: &'static str,
    requests: u64,
    served: u64,
    failed: u64,
    refused: u64,
}

/// A connection served to its end.
struct Served {
    closed: String,
    answered: u64,
    /// What the client asked for.
    ask: Ask,
}

/// Whether the client takes the descriptor as the first message.
fn wants_message(pdata: &[u8]) -> bool {
    pdata.starts_with(EXPORT.as_bytes())
}

/// How the region is served.
#[derive(Clone, Copy)]
struct Serving<'a> {
    /// Each connection gets an export of its own.
    exports: bool,
    pcfg: &'a PeerCfg,
    /// `--timeout`.
    timeout: Duration,
    out: Out,
}

/// Serves connection `n` until the client closes it: receives posted for
/// its GPSPM requests, each answered once the range is persisted. A client
/// that asks for it ([`EXPORT`]) gets the region's descriptor as the first
/// message: its export's, or the shared one; exporting, a client that does
/// not (a librpma client) is refused.
fn serve(n: u64, req: ConnReq, peer: &Peer, region: &Region, pdata: &[u8], how: Serving) -> Res<Served> {
    let message = wants_message(req.private_data());
    if how.exports && !message {
        drop(req);
        return Err("refused: the client does not take the region's descriptor as a message (a librpma client?); \
                    serve without --isolate for it"
            .into());
    }
    let ask = match Ask::decode(req.private_data()) {
        Ok(ask) => ask,
        Err(why) => {
            drop(req);
            return Err(format!("refused: {why}").into());
        }
    };
    if matches!(ask, Ask::WriteEcho { .. }) && !message {
        drop(req);
        return Err("refused: a write ping-pong's buffer is described in a message the client did not ask for".into());
    }
    let Slots { recvs, sends, size: slot } = ask.slots(MSG_SIZE);
    // One more send slot for the descriptor.
    let mut msgs = Messages::new(peer, slot, sends + 1, recvs, MsgAccess::Msgs)?;
    (0..recvs).try_for_each(|r| msgs.post_recv_req(&req, r))?;
    // A write ping-pong's buffer, the connection's own, described instead
    // of the region.
    let own = match ask {
        Ask::WriteEcho { size } => {
            let usage =
                if how.exports { Usage::MW_BIND | Usage::WRITE_SRC } else { Usage::WRITE_DST | Usage::WRITE_SRC };
            let mr = MrLocal::reg(peer, rpma::Memory::Dram(AlignedBuf::new(size)?), usage)?;
            let pdata = CommonData::encode(0, &mr, Some(how.pcfg));
            Some((mr, pdata))
        }
        _ => None,
    };
    let conn = req.connect(if how.exports { &[] } else { pdata })?;
    let (described, desc) = own.as_ref().map_or((region, pdata), |(mr, pd)| (mr, &pd[..]));
    let r = match conn.next_event_timeout(how.timeout) {
        Ok(ConnEvent::Established) => {
            how.out.say(format!("connection {n}: established"));
            describe(&conn, &mut msgs, sends, described, desc, how, message).and_then(|export| {
                let r = match &own {
                    Some((mr, _)) => echo_writes(&conn, &mut msgs, mr, how.timeout),
                    None => answer(&conn, &mut msgs, sends, region, ask, how.timeout),
                };
                drop(export);
                r
            })
        }
        Ok(ev) => Err(format!("accepting failed: {ev}").into()),
        Err(e) => Err(e.into()),
    };
    // Whatever happened, the client is told.
    let _ = conn.disconnect();
    let (ev, answered) = r?;
    Ok(Served { closed: ev.to_string(), answered, ask })
}

/// Sends the region's descriptor as the first message (from send slot
/// `qd`, whose completion [`answer`] takes) when the client asked for it:
/// an export of its own when exporting. Returns the export, which ends when
/// dropped.
fn describe(
    conn: &Conn,
    msgs: &mut Messages,
    qd: usize,
    region: &Region,
    pdata: &[u8],
    how: Serving,
    message: bool,
) -> Res<Option<Export>> {
    if !message {
        return Ok(None);
    }
    let (export, desc) = if how.exports {
        let export = export(region, conn)?;
        let desc = CommonData::encode_export(0, &export, Some(how.pcfg))?;
        (Some(export), desc.to_vec())
    } else {
        (None, pdata.to_vec())
    };
    msgs.send(conn, qd, &desc, Flags::COMPLETION_ALWAYS)?;
    Ok(export)
}

/// Answers what `ask` asks for on `conn`, from its `qd` send slots (slot
/// `qd` sent the descriptor), until
/// its next event (the client's close): GPSPM flush requests, or sends
/// (reposting their receives, and echoing them for a ping-pong). Returns
/// the event and the count of requests answered or sends received. Waits
/// as long as the client keeps the connection (it may be idle); a client
/// that dies is seen as the close or as a failed response. Sends'
/// completions are busy-polled, as perftest's server does (then polled each
/// millisecond once idle: [`echo::SPINS`]); GPSPM's sleep on completion
/// events.
fn answer(
    conn: &Conn,
    msgs: &mut Messages,
    qd: usize,
    region: &Region,
    ask: Ask,
    timeout: Duration,
) -> Res<(ConnEvent, u64)> {
    let cq = conn.cq();
    let mut free: Vec<usize> = (0..qd).collect();
    let mut backlog = VecDeque::new();
    let mut answered = 0u64;
    let mut wcs = [rpma::Cq::EMPTY; 16];
    let spin = matches!(ask, Ask::Send { .. });
    let mut idle = 0u32;
    loop {
        if spin {
            idle = idle.saturating_add(1);
            if let Some(ev) = echo::closed(conn, idle)? {
                return Ok((ev, answered));
            }
        } else {
            let ready = poll_fds(&[cq.as_fd(), conn.as_fd()], None)?;
            if ready[1] {
                return Ok((conn.next_event()?, answered));
            }
            if ready[0] {
                cq.wait()?;
            }
        }
        loop {
            let got = cq.get_wc(&mut wcs)?;
            if got == 0 {
                break;
            }
            idle = 0;
            for wc in &wcs[..got] {
                if let Some(ev) = echo::ended(conn, wc, timeout)? {
                    return Ok((ev, answered));
                }
                match msgs.slot(wc) {
                    // Slot `qd` sent the descriptor: not one for responses.
                    Some(Slot::Send(s)) if s == qd => {}
                    Some(Slot::Send(s)) => free.push(s),
                    // A send to take and drop: its receive goes again.
                    Some(Slot::Recv(r)) if matches!(ask, Ask::Send { echo: false, .. }) => {
                        msgs.post_recv(conn, r)?;
                        answered += 1;
                    }
                    Some(Slot::Recv(r)) => backlog.push_back((r, wc.byte_len as usize)),
                    None => return Err(format!("a completion of nothing posted here: {wc:?}").into()),
                }
            }
        }
        while !backlog.is_empty() && !free.is_empty() {
            let (Some((r, len)), Some(s)) = (backlog.pop_front(), free.pop()) else { break };
            let msg = msgs.received(r, len)?;
            let reply = match ask {
                Ask::Gpspm { .. } => {
                    let req =
                        FlushRequest::decode(&msg).map_err(|e| format!("the client's GPSPM flush request: {e}"))?;
                    persist(region, &req)?;
                    FlushResponse::new(req.op_context).encode().to_vec()
                }
                _ => msg,
            };
            // The client sends its next request once answered: the receive
            // for it goes first.
            msgs.post_recv(conn, r)?;
            msgs.send(conn, s, &reply, Flags::COMPLETION_ALWAYS)?;
            answered += 1;
        }
    }
}
