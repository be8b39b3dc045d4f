//! Connection configuration.

use crate::cq::SharedCq;
use crate::error::{Error, Result};
use crate::srq::Srq;
use std::time::Duration;

/// librpma's `RPMA_DEFAULT_TIMEOUT_MS`.
pub const DEFAULT_TIMEOUT_MS: i32 = 1000;

/// rpma's default RNR NAK timer code: 12, 0.64 ms (IBA table 45).
pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;

/// The inline data a connection asks for unless told otherwise: librpma's 8
/// bytes, what its emulated atomic write (an inline 8-byte write) needs.
pub const DEFAULT_MAX_INLINE_DATA: u32 = 8;

/// How a connection is set up (librpma's `rpma_conn_cfg`).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | timeout | 1000 ms | address and route resolution on the active side |
/// | cq_size | 10 | main completion queue |
/// | rcq_size | 0 | separate receive completion queue (0: none, receives go to the main CQ) |
/// | sq_size | 10 | send queue depth (operations in flight without a reaped signaled completion) |
/// | rq_size | 10 | receive queue depth |
/// | compl_channel | false | one completion channel shared by the CQ and the RCQ |
/// | srq | none | a shared receive queue |
/// | shared_cq | none | one completion queue for many connections (not in librpma; excludes rcq_size and compl_channel) |
/// | min_rnr_timer | 12 (0.64 ms) | how long a sender waits when a message finds no receive posted here (not in librpma, which keeps rdma_cm's 0 = 655 ms) |
/// | max_send_sge | 1 | scatter/gather elements per send-queue operation ([`WriteSg`](crate::ops::WriteSg) and co.; not in librpma) |
/// | max_recv_sge | 1 | scatter/gather elements per receive ([`RecvSg`](crate::ops::RecvSg); not in librpma) |
/// | max_inline_data | 8 | bytes an operation may carry inline ([`WriteInline`](crate::ops::WriteInline); librpma's value, which its emulated atomic write needs) |
///
/// Setters chain (`&mut Self`, or `Result<&mut Self>` for the ones that
/// check their value):
///
/// ```
/// let mut cfg = rpma::ConnCfg::new();
/// cfg.set_sq_size(64).set_cq_size(64).set_timeout(std::time::Duration::from_millis(500))?.set_max_send_sge(4)?;
/// assert_eq!((cfg.sq_size(), cfg.cq_size(), cfg.max_send_sge()), (64, 64, 4));
/// assert_eq!(cfg.timeout(), std::time::Duration::from_millis(500));
/// assert!(cfg.set_timeout(std::time::Duration::MAX).is_err());
/// # Ok::<(), rpma::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConnCfg {
    timeout_ms: i32,
    cq_size: u32,
    rcq_size: u32,
    sq_size: u32,
    rq_size: u32,
    compl_channel: bool,
    srq: Option<Srq>,
    shared_cq: Option<SharedCq>,
    min_rnr_timer: u8,
    native_ops: bool,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

impl Default for ConnCfg {
    fn default() -> Self {
        ConnCfg {
            timeout_ms: DEFAULT_TIMEOUT_MS,
            cq_size: 10,
            rcq_size: 0,
            sq_size: 10,
            rq_size: 10,
            compl_channel: false,
            srq: None,
            shared_cq: None,
            native_ops: true,
            min_rnr_timer: DEFAULT_MIN_RNR_TIMER,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: DEFAULT_MAX_INLINE_DATA,
        }
    }
}

impl ConnCfg {
    /// The defaults above (`rpma_conn_cfg_new`).
    pub fn new() -> ConnCfg {
        ConnCfg::default()
    }

    /// Sets the timeout of address and route resolution on the active side
    /// ([`ConnReq::new`](crate::ConnReq::new)). librpma keeps it as an
    /// `int` of milliseconds: it is rounded up to whole milliseconds (so a
    /// timeout above 0 stays above 0), and may be at most `i32::MAX` ms
    /// (about 24.8 days).
    ///
    /// # Errors
    /// [`Error::Inval`] for a timeout longer than `i32::MAX` milliseconds
    /// (such as `Duration::MAX`: resolution has no "no limit").
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<&mut Self> {
        self.timeout_ms = crate::error::timeout_ms(
            &crate::error::Named::new(crate::error::Arg::Timeout, "ConnCfg timeout"),
            timeout,
        )?;
        Ok(self)
    }

    /// The resolution timeout (whole milliseconds).
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unsigned_abs().into())
    }

    /// The resolution timeout in milliseconds, as librpma's calls take it.
    pub(crate) fn timeout_ms(&self) -> i32 {
        self.timeout_ms
    }

    /// Sets the main CQ size.
    pub fn set_cq_size(&mut self, n: u32) -> &mut Self {
        self.cq_size = n;
        self
    }

    /// The main CQ size.
    pub fn cq_size(&self) -> u32 {
        self.cq_size
    }

    /// Sets the receive CQ size (0: no separate receive CQ).
    pub fn set_rcq_size(&mut self, n: u32) -> &mut Self {
        self.rcq_size = n;
        self
    }

    /// The receive CQ size.
    pub fn rcq_size(&self) -> u32 {
        self.rcq_size
    }

    /// Sets the send queue depth.
    pub fn set_sq_size(&mut self, n: u32) -> &mut Self {
        self.sq_size = n;
        self
    }

    /// The send queue depth.
    pub fn sq_size(&self) -> u32 {
        self.sq_size
    }

    /// Sets the receive queue depth.
    pub fn set_rq_size(&mut self, n: u32) -> &mut Self {
        self.rq_size = n;
        self
    }

    /// The receive queue depth.
    pub fn rq_size(&self) -> u32 {
        self.rq_size
    }

    /// Whether the CQ and RCQ share one completion channel (then wait with
    /// [`Conn::wait`](crate::Conn::wait)).
    pub fn set_compl_channel(&mut self, shared: bool) -> &mut Self {
        self.compl_channel = shared;
        self
    }

    /// Whether the completion channel is shared.
    pub fn compl_channel(&self) -> bool {
        self.compl_channel
    }

    /// Uses `srq` for receives (or none).
    pub fn set_srq(&mut self, srq: Option<&Srq>) -> &mut Self {
        self.srq = srq.cloned();
        self
    }

    /// The shared receive queue.
    pub fn srq(&self) -> Option<&Srq> {
        self.srq.as_ref()
    }

    /// Sends the connection's completions, and its receives' unless its
    /// SRQ has a receive CQ, to `cq` (or to a CQ of its own): see
    /// [`SharedCq`]. The connection must be made on the peer the CQ was
    /// created on, with `rcq_size` 0 and no shared completion channel;
    /// it reserves `sq_size + rq_size` of the CQ's entries while it exists.
    pub fn set_shared_cq(&mut self, cq: Option<&SharedCq>) -> &mut Self {
        self.shared_cq = cq.cloned();
        self
    }

    /// The shared completion queue.
    pub fn shared_cq(&self) -> Option<&SharedCq> {
        self.shared_cq.as_ref()
    }

    /// Sets the RNR NAK timer code this side's QP sends when a message
    /// arrives and no receive is posted: the sender waits that long before
    /// it retries (IBA table 45: 1 = 0.01 ms, 12 = 0.64 ms, 14 = 1.28 ms,
    /// 18 = 5.12 ms, 31 = 491.52 ms, and 0 = 655.36 ms). rdma_cm, and so
    /// librpma, leave it at 0: one receive posted late then stalls the sender
    /// for 655 ms. rpma applies this value when the connection is
    /// established.
    ///
    /// ```
    /// let mut cfg = rpma::ConnCfg::new();
    /// assert_eq!(cfg.min_rnr_timer(), 12);
    /// cfg.set_min_rnr_timer(0)?; // rdma_cm's (and librpma's) behaviour
    /// assert!(cfg.set_min_rnr_timer(32).is_err());
    /// # Ok::<(), rpma::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] for a code above 31.
    pub fn set_min_rnr_timer(&mut self, code: u8) -> Result<&mut Self> {
        if code > 31 {
            return Err(Error::inval(format!("RNR timer code {code} is above 31 (IBA table 45)")));
        }
        self.min_rnr_timer = code;
        Ok(self)
    }

    /// The RNR NAK timer code.
    pub fn min_rnr_timer(&self) -> u8 {
        self.min_rnr_timer
    }

    /// Whether the connection may use the native RDMA FLUSH and ATOMIC WRITE
    /// (IBA 1.5) where this side's peer supports them (the default). Off,
    /// `flush` is an 8-byte RDMA READ (APM) and `atomic_write` a fenced
    /// inline write, as on a device without them: for a responder whose
    /// device lacks IBA 1.5 (native requests to it fail), or to measure one
    /// against the other. The emulated flush reads the remote region, so
    /// that region needs remote read access (`READ_SRC`, or any flush usage
    /// registered by a peer without native flush).
    ///
    /// ```
    /// let mut cfg = rpma::ConnCfg::new();
    /// assert!(cfg.native_ops());
    /// cfg.set_native_ops(false);
    /// assert!(!cfg.native_ops());
    /// ```
    pub fn set_native_ops(&mut self, on: bool) -> &mut Self {
        self.native_ops = on;
        self
    }

    /// Whether native flush and atomic write may be used.
    pub fn native_ops(&self) -> bool {
        self.native_ops
    }

    /// Sets the scatter/gather elements one send-queue operation may carry
    /// (`max_send_sge` of the QP): the longest list
    /// [`WriteSg`](crate::ops::WriteSg), [`ReadSg`](crate::ops::ReadSg) and
    /// [`SendSg`](crate::ops::SendSg) take. The device may grant more (Soft-RoCE sizes its work requests by
    /// the larger of the SGEs and the inline data); the connection reports
    /// what it got in [`Conn::max_send_sge`](crate::Conn::max_send_sge).
    /// Checked against the device's `max_sge` when the connection is set up.
    ///
    /// ```
    /// let mut cfg = rpma::ConnCfg::new();
    /// assert_eq!(cfg.max_send_sge(), 1);
    /// cfg.set_max_send_sge(4)?;
    /// assert!(cfg.set_max_send_sge(0).is_err());
    /// # Ok::<(), rpma::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] for 0 or more than [`MAX_SGL`].
    pub fn set_max_send_sge(&mut self, n: u32) -> Result<&mut Self> {
        self.max_send_sge = check_sge("max_send_sge", n)?;
        Ok(self)
    }

    /// The scatter/gather elements asked for per send-queue operation.
    pub fn max_send_sge(&self) -> u32 {
        self.max_send_sge
    }

    /// Sets the scatter/gather elements one receive may carry
    /// (`max_recv_sge` of the QP; [`RecvSg`](crate::ops::RecvSg)).
    /// The device may grant more ([`Conn::max_recv_sge`](crate::Conn::max_recv_sge)).
    /// Checked against the device's `max_sge` when the connection is set up;
    /// unused with an SRQ.
    ///
    /// # Errors
    /// [`Error::Inval`] for 0 or more than [`MAX_SGL`].
    pub fn set_max_recv_sge(&mut self, n: u32) -> Result<&mut Self> {
        self.max_recv_sge = check_sge("max_recv_sge", n)?;
        Ok(self)
    }

    /// The scatter/gather elements asked for per receive.
    pub fn max_recv_sge(&self) -> u32 {
        self.max_recv_sge
    }

    /// Sets the bytes one operation may carry inline (`max_inline_data` of
    /// the QP): the most [`WriteInline`](crate::ops::WriteInline) and
    /// [`SendInline`](crate::ops::SendInline) take. The device
    /// may grant more ([`Conn::max_inline_data`](crate::Conn::max_inline_data))
    /// and refuses more than it supports when the connection is set up
    /// ([`Error::Provider`] from `rdma_create_qp_ex`, `EINVAL`; devices
    /// report no bound to check beforehand). Below 8 the emulated atomic
    /// write (an inline 8-byte write, on a device without the native one)
    /// is refused, unless the device grants 8 all the same.
    ///
    /// ```
    /// let mut cfg = rpma::ConnCfg::new();
    /// assert_eq!(cfg.max_inline_data(), 8);
    /// cfg.set_max_inline_data(64);
    /// assert_eq!(cfg.max_inline_data(), 64);
    /// ```
    pub fn set_max_inline_data(&mut self, bytes: u32) -> &mut Self {
        self.max_inline_data = bytes;
        self
    }

    /// The inline bytes asked for.
    pub fn max_inline_data(&self) -> u32 {
        self.max_inline_data
    }
}

/// Most scatter/gather elements a [`ConnCfg`] asks for per work request
/// (rpma builds its lists on the stack).
pub const MAX_SGL: u32 = rpma_sys::wr::MAX_SGL as u32;

fn check_sge(what: &str, n: u32) -> Result<u32> {
    if n == 0 || n > MAX_SGL {
        return Err(Error::inval(format!("{what} {n} is outside 1..={MAX_SGL}")));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_is_librpmas_int_milliseconds() {
        let mut cfg = ConnCfg::new();
        assert_eq!(cfg.timeout(), Duration::from_millis(DEFAULT_TIMEOUT_MS as u64));
        for (set, ms) in [(Duration::ZERO, 0), (Duration::from_nanos(1), 1), (Duration::from_micros(1500), 2)] {
            cfg.set_timeout(set).unwrap();
            assert_eq!((cfg.timeout(), cfg.timeout_ms()), (Duration::from_millis(ms as u64), ms), "{set:?}");
        }
        let max = Duration::from_millis(i32::MAX as u64);
        cfg.set_timeout(max).unwrap();
        assert_eq!(cfg.timeout_ms(), i32::MAX);
        for too_long in [max + Duration::from_nanos(1), Duration::from_secs(u64::MAX), Duration::MAX] {
            let e = cfg.set_timeout(too_long).unwrap_err();
            assert_eq!(e.code(), crate::error::RPMA_E_INVAL);
            assert!(
                matches!(e.detail(), Some(crate::error::Detail::TooLong { max, .. }) if *max == i32::MAX as u64),
                "{e}"
            );
            assert_eq!(cfg.timeout(), max, "unchanged");
        }
    }
}
