//! What `ping` and `bench` share: the target, connecting to it, and
//! checking a completion.

use crate::echo::Ask;
use crate::serve::EXPORT;
use crate::{Res, BOUND};
use rpma::common_data::COMMON_DATA_SIZE;
use rpma::device::{get_ibv_context, ContextType};
use rpma::{AlignedBuf, CommonData, Completion, Conn, ConnCfg, ConnEvent, ConnReq, MrLocal, MrRemote, Peer, Usage};

/// The target of `ping` and `bench`.
#[derive(clap::Args, serde::Serialize)]
pub struct Target {
    /// The address of the target (`rpma serve`, or a librpma server).
    pub addr: String,
    /// Its port (perftest's 18515 unless given here or as `-p`).
    #[arg(value_name = "PORT", default_value_t = crate::DEFAULT_PORT)]
    port_arg: u16,
    /// The port, as perftest's `-p` (instead of PORT).
    #[arg(short = 'p', long = "port", value_name = "PORT", conflicts_with = "port_arg")]
    port_flag: Option<u16>,
}

impl Target {
    /// The target's port: `-p`'s, else PORT's.
    pub fn port(&self) -> u16 {
        self.port_flag.unwrap_or(self.port_arg)
    }
}

/// A peer on the device that reaches the target.
pub fn peer(t: &Target) -> Res<Peer> {
    Ok(Peer::new(&get_ibv_context(&t.addr, ContextType::Remote)?)?)
}

/// Connects with queues for `depth` operations in flight, asking the
/// target for what `ask` says (receives for GPSPM requests or sends, a
/// ping-pong). The target's region (a write ping-pong's buffer) and peer
/// configuration come as the connection's first message (see [`EXPORT`]),
/// into a receive posted before connecting.
pub fn connect(peer: &Peer, t: &Target, depth: u32, ask: Option<Ask>) -> Res<(Conn, MrRemote)> {
    let (conn, desc) = dial(peer, t, depth, ask)?;
    let target = format!("{}:{}", t.addr, t.port());
    let cd = first_message(&conn, &desc).map_err(|why| NoDescriptor { target, why, private_data: false });
    take(conn, cd)
}

/// As [`connect`] with a depth of 1, also to a librpma server (librpma's
/// examples, fio's librpma_apm_server): the descriptor in the target's
/// private data is taken when there is one; else the first message is
/// awaited. A `rpma serve` target without `--isolate` sends both: the
/// message's receive completes later, with [`DESC_CONTEXT`], for the caller
/// to pass over.
pub fn connect_any(peer: &Peer, t: &Target) -> Res<(Conn, MrRemote)> {
    let (conn, desc) = dial(peer, t, 1, None)?;
    let cd = match CommonData::decode(conn.private_data()) {
        Ok(cd) => Ok(cd),
        Err(pd) => first_message(&conn, &desc).map_err(|e| NoDescriptor {
            target: format!("{}:{}", t.addr, t.port()),
            why: format!("private data: {pd}; first message: {e}"),
            private_data: true,
        }),
    };
    take(conn, cd)
}

/// A connection whose region descriptor's receive is posted.
fn dial(peer: &Peer, t: &Target, depth: u32, ask: Option<Ask>) -> Res<(Conn, MrLocal<AlignedBuf>)> {
    let mut cfg = ConnCfg::new();
    // A write + flush, or a write + GPSPM request, is two work requests; a
    // GPSPM request or a ping also brings an answer; one more receive (and
    // its completion) for the descriptor.
    cfg.set_sq_size(2 * depth + 1);
    cfg.set_cq_size(if ask.is_some() { 3 } else { 2 } * depth + 2);
    cfg.set_rq_size(depth + 1);
    let pdata = format!("{EXPORT}{}", ask.map(|a| a.encode()).unwrap_or_default());
    let desc = MrLocal::reg(peer, AlignedBuf::new(COMMON_DATA_SIZE)?, Usage::RECV)?;
    let req = ConnReq::new(peer, &t.addr, t.port(), Some(&cfg))?;
    req.recv(&desc, 0, COMMON_DATA_SIZE, DESC_CONTEXT)?;
    let conn = req.connect(pdata.as_bytes())?;
    match conn.next_event_timeout(BOUND)? {
        ConnEvent::Established => Ok((conn, desc)),
        ConnEvent::Rejected => Err(format!(
            "{}:{} refused the connection: is a server listening there, with room for another connection?",
            t.addr,
            t.port()
        )
        .into()),
        ev => Err(format!("{}:{} answered {ev} (is `rpma serve` running there?)", t.addr, t.port()).into()),
    }
}

/// The descriptor sent as `conn`'s first message, into `desc`.
fn first_message(conn: &Conn, desc: &MrLocal<AlignedBuf>) -> Result<CommonData, String> {
    let wc = conn.cq().next_completion(BOUND).map_err(|e| match e {
        rpma::Error::NoCompletion => format!("no message within {} s", BOUND.as_secs()),
        e => e.to_string(),
    });
    wc.and_then(|wc| match wc.status.is_success() && wc.op_context == DESC_CONTEXT {
        true => {
            let mut b = vec![0u8; (wc.byte_len as usize).min(COMMON_DATA_SIZE)];
            desc.read_at(0, &mut b).map_err(|e| e.to_string())?;
            CommonData::decode(&b).map_err(|e| e.to_string())
        }
        false => Err(format!("{wc:?}")),
    })
}

/// The region of `conn`, whose peer configuration is applied; closes it
/// when there is none.
fn take(conn: Conn, cd: Result<CommonData, NoDescriptor>) -> Res<(Conn, MrRemote)> {
    let cd = match cd {
        Ok(cd) => cd,
        Err(e) => {
            let _ = close(conn);
            return Err(e.into());
        }
    };
    if let Some(pc) = cd.peer_cfg {
        conn.apply_remote_peer_cfg(&pc);
    }
    Ok((conn, cd.mr))
}

/// A target that gave no region descriptor, neither in its private data
/// (librpma's servers) nor as the first message (`rpma serve`).
#[derive(Debug)]
pub struct NoDescriptor {
    /// `ADDR:PORT`.
    pub target: String,
    /// What came instead.
    pub why: String,
    /// Whether the private data was looked at (`ping`; `bench` takes the
    /// first message only).
    pub private_data: bool,
}

impl std::fmt::Display for NoDescriptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} sent no region descriptor ({}): is it `rpma serve`", self.target, self.why)?;
        match self.private_data {
            true => write!(f, ", or a librpma server that puts its region's descriptor in the private data?"),
            false => write!(f, "?"),
        }
    }
}

impl std::error::Error for NoDescriptor {}

/// The op context of the descriptor's receive.
pub const DESC_CONTEXT: u64 = u64::MAX - 0x44;

/// `wc`, if it succeeded.
pub fn check(wc: &Completion) -> Res<()> {
    if !wc.status.is_success() {
        return Err(format!("operation {:#x} ({:?}) failed: {}", wc.op_context, wc.op, wc.status).into());
    }
    Ok(())
}

pub fn close(conn: Conn) -> Res<()> {
    conn.disconnect()?;
    let _ = conn.next_event_timeout(BOUND);
    Ok(())
}
