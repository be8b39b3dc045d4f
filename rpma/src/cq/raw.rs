//! Completions in libibverbs' layout ([`IbvWc`]), as librpma's
//! `rpma_cq_get_wc` returns them: the provider's entry as it wrote it, its
//! `wr_id` the operation's op context.

use super::{note_invalidation, reaped, retire, Completion, Cq};
use crate::error::{Error, Result};
use std::mem::MaybeUninit;

pub use rpma_sys::cq::IbvWc;
use rpma_sys::cq::{WC_WITH_IMM, WC_WITH_INV};

impl Cq {
    /// Polls up to `wc.len()` completions into `wc` in libibverbs' layout
    /// (`struct ibv_wc`, librpma's `rpma_cq_get_wc`): each operation retired
    /// as by [`get_wc`](Cq::get_wc) (its hold released), its op context in
    /// `wr_id`, the other fields as the provider wrote them (immediate data
    /// in network order). Returns how many it wrote, at the front of `wc`.
    ///
    /// ```
    /// # #[allow(dead_code)]
    /// fn drain(cq: &rpma::Cq) -> rpma::Result<usize> {
    ///     let mut wc = [std::mem::MaybeUninit::uninit(); 16];
    ///     let n = cq.get_ibv_wc(&mut wc)?;
    ///     for w in &wc[..n] {
    ///         // SAFETY: get_ibv_wc wrote the first n entries.
    ///         let w: rpma::cq::IbvWc = unsafe { w.assume_init() };
    ///         assert_eq!(w.status, 0, "op context {}", w.wr_id);
    ///     }
    ///     Ok(n)
    /// }
    /// ```
    ///
    /// # Errors
    /// As [`get_wc`](Cq::get_wc).
    #[inline]
    pub fn get_ibv_wc(&self, wc: &mut [MaybeUninit<IbvWc>]) -> Result<usize> {
        // The common single poll of a CQ of its own, inline: the provider
        // writes into the caller's entry, the retire is inlined, then the
        // op context replaces the work request ID there: nothing copied.
        // The rest (and its larger frame) out of line.
        if let ([one], None) = (&mut *wc, &self.routes) {
            if self.plain || !self.is_reaped() {
                return match self.cq.poll_into(one) {
                    Ok(Some(w)) => {
                        // An untracked operation's context is in its ID (the
                        // C ABI's common case); a tracker's entry is retired
                        // out of line.
                        let ctx = match crate::wrid::untracked_ctx(w.wr_id()) {
                            Some(ctx) => ctx,
                            None => self.retire_ctx(w),
                        };
                        note_invalidation(w, &self.windows);
                        w.set_wr_id(ctx);
                        Ok(1)
                    }
                    Ok(None) => Ok(0),
                    Err(e) => Err(Error::provider_raw("ibv_poll_cq", e)),
                };
            }
        }
        self.get_ibv_wc_other(wc)
    }

    /// The op context of a tracked operation's completion, its entry retired.
    #[inline(never)]
    fn retire_ctx(&self, w: &rpma_sys::cq::PolledWc) -> u64 {
        retire(w, self.send.as_deref(), self.recv.as_deref(), self.srq_recv.as_deref()).0
    }

    /// [`get_ibv_wc`](Cq::get_ibv_wc) of more than one entry, on a shared
    /// CQ, or refused.
    #[inline(never)]
    fn get_ibv_wc_other(&self, wc: &mut [MaybeUninit<IbvWc>]) -> Result<usize> {
        if wc.is_empty() {
            return Err(Error::inval("get_ibv_wc: the output slice is empty; pass room for at least 1 completion"));
        }
        if !self.plain && self.is_reaped() {
            return Err(reaped());
        }
        let got = match &self.routes {
            None => self
                .cq
                .poll_each(wc.len(), |i, w| {
                    let (ctx, _) = retire(w, self.send.as_deref(), self.recv.as_deref(), self.srq_recv.as_deref());
                    note_invalidation(w, &self.windows);
                    wc[i].write(w.to_ibv_wc(ctx));
                })
                .map_err(|e| Error::provider_raw("ibv_poll_cq", e))?,
            // A shared CQ routes through its set-aside list: by way of
            // `Completion`s, a batch at a time.
            Some(r) => {
                let mut c = [Cq::EMPTY; 16];
                let n = r.get_wc(self, &mut c[..wc.len().min(16)])?;
                for (o, c) in wc.iter_mut().zip(&c[..n]) {
                    o.write(IbvWc::from(c));
                }
                n
            }
        };
        Ok(got)
    }
}

/// A [`Completion`] in libibverbs' layout (the fields it keeps; the others
/// 0).
impl From<&Completion> for IbvWc {
    fn from(c: &Completion) -> IbvWc {
        let (imm_data, wc_flags) = match (c.imm, c.invalidated_rkey) {
            (Some(imm), _) => (imm.to_be(), WC_WITH_IMM),
            (None, Some(rkey)) => (rkey, WC_WITH_INV),
            (None, None) => (0, 0),
        };
        IbvWc {
            wr_id: c.op_context,
            status: c.status.0,
            opcode: c.wc_opcode,
            byte_len: c.byte_len,
            imm_data,
            qp_num: c.qp_num,
            wc_flags,
            ..IbvWc::default()
        }
    }
}
