//! Connection (librpma's `rpma_conn`), split by job: `parts` owns the
//! resources and their release order, `events` the CM events
//! ([`ConnEvent`]) and completion waits, `data` the data path;
//! memory-window operations live with [`Mw`](crate::Mw) (`mw.rs`).

mod chain;
mod data;
mod events;
mod parts;
mod post;
mod sg;

pub use crate::conn_event::{conn_event_2str, conn_event_value_2str, ConnEvent};
pub use chain::{Chain, CHAIN_MAX};
pub(crate) use events::cm_event;
pub(crate) use parts::{ConnParts, EndWithConn, NativeOps, QpLimits};

use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::peer::Peer;
use crate::peer_cfg::PeerCfg;
use rpma_sys::cm::EventChannel;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// An RDMA connection (librpma's `rpma_conn`).
///
/// Operations post work requests and return at once; their completions
/// arrive on [`cq`](Conn::cq) (and receives on [`rcq`](Conn::rcq) when
/// configured). Every local region an operation uses is kept alive until the
/// operation completes, so dropping or deregistering it early is safe:
/// [`MrLocal::dereg`](crate::MrLocal::dereg) reports [`Error::Again`] instead of freeing it.
///
/// ```no_run
/// use rpma::{AlignedBuf, CommonData, Flags, MrLocal, Usage};
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn) -> rpma::Result<()> {
/// let remote = CommonData::decode(conn.private_data())?.mr;
/// let src = MrLocal::reg(conn.peer(), AlignedBuf::new(4096)?, Usage::WRITE_SRC)?;
/// src.write_at(0, b"log record")?;
/// conn.write(&remote, 0, &src, 0, 10, Flags::COMPLETION_ON_ERROR, 1)?;
/// conn.flush(&remote, 0, 10, rpma::FlushType::Visibility, Flags::COMPLETION_ALWAYS, 2)?;
/// let wc = conn.cq().next_completion(std::time::Duration::from_secs(5))?;
/// assert_eq!(wc.op_context, 2);
/// # Ok(()) }
/// ```
///
/// # Teardown
/// Client: [`disconnect`](Conn::disconnect), wait for
/// [`ConnEvent::Closed`], drop. Server: wait for `Closed`, `disconnect`, drop.
/// Over IB/RoCE the side that disconnects first sees `Closed` only after the
/// other side has called `disconnect` too (the CM's DREP answers its DREQ).
/// Dropping a connection that is still up is allowed and prompt (the CM
/// tells the other side, which sees `Closed`): there is no implicit
/// disconnect. Type 2 memory windows still bound on the connection end
/// with it (deallocated before its QP, which a provider may otherwise be
/// slow to destroy); the regions they hold are released then.
///
/// # Thread safety
/// `Conn` is `Send + Sync`: the data path may be used from several threads;
/// posting is serialised per send queue.
pub struct Conn {
    parts: ConnParts,
    channel: EventChannel,
    private_data: OnceLock<Vec<u8>>,
    direct_write_to_pmem: AtomicBool,
    /// An [`AsyncConn`](crate::aio::AsyncConn) owns the connection and
    /// takes its events: [`Conn::next_event`] refuses.
    events_reaped: bool,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("qp_num", &self.qp_num())
            .field("pending_sends", &self.parts.send.pending())
            .field("pending_recvs", &self.parts.recv.pending())
            .finish()
    }
}

impl Conn {
    pub(crate) fn new(parts: ConnParts, channel: EventChannel, incoming: Vec<u8>) -> Conn {
        let private_data = OnceLock::new();
        if parts.id.is_passive() {
            let _ = private_data.set(incoming);
        }
        Conn { parts, channel, private_data, direct_write_to_pmem: AtomicBool::new(false), events_reaped: false }
    }

    /// The private data the other side sent (`rpma_conn_get_private_data`):
    /// with its connection request (passive side) or its accept (active side,
    /// available once [`ConnEvent::Established`] was seen). Over IB/RoCE the
    /// CM pads it with zeros, so it can be longer than what was sent.
    pub fn private_data(&self) -> &[u8] {
        self.private_data.get().map(Vec::as_slice).unwrap_or(&[])
    }

    /// Applies the remote peer's configuration (`rpma_conn_apply_remote_peer_cfg`):
    /// whether it supports direct write to persistent memory.
    pub fn apply_remote_peer_cfg(&self, cfg: &PeerCfg) {
        self.direct_write_to_pmem.store(cfg.direct_write_to_pmem(), Ordering::Relaxed);
    }

    /// The peer the connection was made on; register the regions it uses
    /// there.
    pub fn peer(&self) -> &Peer {
        &self.parts.peer
    }

    /// The QP number (`rpma_conn_get_qp_num`).
    pub fn qp_num(&self) -> u32 {
        self.parts.id.qp().map_or(0, |q| q.qp_num())
    }

    /// The transport's retry settings for this connection, as the connection
    /// manager set them on the QP (not in librpma): how long an unacknowledged
    /// operation is retried before it completes with
    /// [`WcStatus::RETRY_EXC_ERR`](crate::WcStatus::RETRY_EXC_ERR).
    ///
    /// # Errors
    /// [`Error::Inval`] when the connection has no QP; [`Error::Provider`]
    /// when `ibv_query_qp` fails.
    pub fn retry_budget(&self) -> Result<RetryBudget> {
        let qp = self.parts.id.qp().ok_or_else(|| Error::Inval("the connection has no QP".into()))?;
        let r = qp.retry().map_err(|e| Error::provider("ibv_query_qp", e))?;
        Ok(RetryBudget {
            ack_timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            rnr_retry: r.rnr_retry,
            min_rnr_timer: r.min_rnr_timer,
        })
    }

    /// The main completion queue (`rpma_conn_get_cq`).
    pub fn cq(&self) -> &Cq {
        &self.parts.cq
    }

    /// The receive completion queue (`rpma_conn_get_rcq`): `None` when
    /// `rcq_size` is 0, or when the SRQ has its own (see [`Srq::rcq`](crate::Srq::rcq)).
    pub fn rcq(&self) -> Option<&Cq> {
        self.parts.rcq.as_ref()
    }

    /// The resources, for the operations defined next to their types
    /// (memory windows).
    pub(crate) fn parts(&self) -> &ConnParts {
        &self.parts
    }
}

/// A connection's reliable-connection retry settings, from
/// [`Conn::retry_budget`].
///
/// When the peer stops acknowledging (it died, or the link is cut) the
/// requester retransmits after the local ACK timeout, `retry_cnt` times,
/// then fails the operation with `RETRY_EXC_ERR`.
/// [`transport_timeout`](RetryBudget::transport_timeout) is that bound as the
/// standard defines it. A provider may take longer, or never report the
/// failure at all (Soft-RoCE on Linux 6.1 does not: see "Faults" in the
/// repository's docs/testing.md), so wait for completions with a bound, such as
/// [`Cq::next_completion`], and tear the connection down on a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryBudget {
    /// The local ACK timeout exponent: 4.096 us x 2^`ack_timeout`; 0 means
    /// the transport never times out.
    pub ack_timeout: u8,
    /// Transport retries after a timeout (0..=7).
    pub retry_cnt: u8,
    /// Retries after a receiver-not-ready NAK; 7 means forever.
    pub rnr_retry: u8,
    /// The RNR NAK timer code this side sends (see
    /// [`ConnCfg::set_min_rnr_timer`](crate::ConnCfg::set_min_rnr_timer)).
    pub min_rnr_timer: u8,
}

impl RetryBudget {
    /// The local ACK timeout, or `None` when it is infinite.
    pub fn ack_timeout_duration(&self) -> Option<Duration> {
        (self.ack_timeout != 0).then(|| Duration::from_nanos(4096u64 << self.ack_timeout.min(31)))
    }

    /// How long an unacknowledged operation is retried before it fails:
    /// the ACK timeout times (1 + `retry_cnt`), or `None` when infinite.
    pub fn transport_timeout(&self) -> Option<Duration> {
        self.ack_timeout_duration().map(|t| t * (1 + u32::from(self.retry_cnt)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_budget_durations() {
        let b = RetryBudget { ack_timeout: 14, retry_cnt: 7, rnr_retry: 7, min_rnr_timer: 12 };
        assert_eq!(b.ack_timeout_duration(), Some(Duration::from_nanos(4096 << 14)));
        assert_eq!(b.transport_timeout(), Some(Duration::from_nanos((4096 << 14) * 8)));
        let never = RetryBudget { ack_timeout: 0, ..b };
        assert_eq!(never.transport_timeout(), None);
    }
}
