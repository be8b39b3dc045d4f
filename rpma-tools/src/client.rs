//! What `ping` and `bench` share: the target, connecting to it, and
//! checking a completion.

use crate::serve::{EXPORT, GPSPM_QD};
use crate::{Res, BOUND};
use rpma::common_data::COMMON_DATA_SIZE;
use rpma::device::{get_ibv_context, ContextType};
use rpma::{AlignedBuf, CommonData, Completion, Conn, ConnCfg, ConnEvent, ConnReq, MrLocal, MrRemote, Peer, Usage};

/// The target of `ping` and `bench`.
#[derive(clap::Args, serde::Serialize)]
pub struct Target {
    /// The address of a `rpma serve` target.
    pub addr: String,
    /// Its port.
    pub port: u16,
}

/// A peer on the device that reaches the target.
pub fn peer(t: &Target) -> Res<Peer> {
    Ok(Peer::new(&get_ibv_context(&t.addr, ContextType::Remote)?)?)
}

/// Connects with queues for `depth` operations in flight; with `gpspm` the
/// target is asked for `depth` receives (see [`GPSPM_QD`]). The target's
/// region and peer configuration come as the connection's first message
/// (see [`EXPORT`]), into a receive posted before connecting.
pub fn connect(peer: &Peer, t: &Target, depth: u32, gpspm: bool) -> Res<(Conn, MrRemote)> {
    let mut cfg = ConnCfg::new();
    // A write + flush, or a write + GPSPM request, is two work requests; a
    // GPSPM request also brings a response; one more receive (and its
    // completion) for the descriptor.
    cfg.set_sq_size(2 * depth + 1);
    cfg.set_cq_size(if gpspm { 3 } else { 2 } * depth + 2);
    cfg.set_rq_size(depth + 1);
    let pdata = if gpspm { format!("{EXPORT}{GPSPM_QD}{depth}") } else { EXPORT.to_string() };
    let desc = MrLocal::reg(peer, AlignedBuf::new(COMMON_DATA_SIZE)?, Usage::RECV)?;
    let req = ConnReq::new(peer, &t.addr, t.port, Some(&cfg))?;
    req.recv(&desc, 0, COMMON_DATA_SIZE, DESC_CONTEXT)?;
    let conn = req.connect(pdata.as_bytes())?;
    match conn.next_event_timeout(BOUND)? {
        ConnEvent::Established => {}
        ev => return Err(format!("{}:{} answered {ev} (is `rpma serve` running there?)", t.addr, t.port).into()),
    }
    let cd = conn.cq().next_completion(BOUND).map_err(|e| e.to_string()).and_then(|wc| {
        match wc.status.is_success() && wc.op_context == DESC_CONTEXT {
            true => {
                let mut b = vec![0u8; (wc.byte_len as usize).min(COMMON_DATA_SIZE)];
                desc.read_at(0, &mut b).map_err(|e| e.to_string())?;
                CommonData::decode(&b).map_err(|e| e.to_string())
            }
            false => Err(format!("{wc:?}")),
        }
    });
    let cd = match cd {
        Ok(cd) => cd,
        Err(e) => {
            let _ = close(conn);
            return Err(format!("{}:{} sent no region descriptor ({e}): is it `rpma serve`?", t.addr, t.port).into());
        }
    };
    if let Some(pc) = cd.peer_cfg {
        conn.apply_remote_peer_cfg(&pc);
    }
    Ok((conn, cd.mr))
}

/// The op context of the descriptor's receive.
const DESC_CONTEXT: u64 = u64::MAX - 0x44;

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
