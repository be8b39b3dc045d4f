//! [`AsyncConn`]: a connection owned by its async handle, every operation
//! awaitable, completions routed by one reaper task per connection (or
//! per [`SharedCq`](crate::SharedCq): [`super::AsyncSharedCq`]).
//!
//! The connection's CQs are polled under its routing lock only: by an
//! awaited operation right after its post, under the same hold of the
//! lock (a device that completes quickly needs no routing slot and no
//! wake-up then), by a future that finds its completion not yet routed,
//! and by the reaper when their channels are readable (tokio's reactor,
//! no busy loop). The CQs are armed only while something waits: a waiter
//! about to sleep arms them and looks once more, and the reaper re-arms
//! them after an event only while a future still waits, so operations
//! whose completions are there at their first look raise no events. Each
//! completion goes to the future that awaits it,
//! found by its op context, or to [`AsyncConn::next_completion`] when the
//! operation was posted on [`AsyncConn::conn`] the librpma way.
//!
//! Memory is held by the connection's in-flight tracker, never by a
//! future: an awaited operation is posted checked ([`Conn::post`]), so its
//! local region stays held until the device reports the completion, whoever
//! receives it. A dropped future only tells the reaper to discard the
//! completion when it comes.

use super::reaper::{reap, Shared};
use super::router::ctx_of;
use crate::conn::Chain;
use crate::conn::ConnEvent;
use crate::conn_cfg::ConnCfg;
use crate::cq::Completion;
use crate::error::{Detail, Error, Msg, Result};
use crate::ops::Operation;
use crate::peer::Peer;
use crate::{Conn, ConnReq};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::task::AbortHandle;

/// A connection owned by its async handle (`'static`, `Send` and `Sync`:
/// move it into a spawned task, or share it in an `Arc`). Every operation
/// is awaitable: [`post`](AsyncConn::post) takes any operation of
/// [`crate::ops`], and the librpma-named methods build one. Each returns
/// the operation's [`Completion`] (with the `op_context` the operation was
/// given).
///
/// Completions reach their futures through one reaper task per connection
/// (spawned on the runtime the handle is made in): no thread, no busy
/// polling. A future whose completion is already in the CQ when it is
/// polled takes it at once, without waking the reaper, and spends a unit
/// of tokio's cooperative budget, so a task whose operations complete
/// at once still yields to the others. The connection's CQs belong to the
/// handle: their own polls
/// and waits refuse ([`Error::Inval`]); operations posted the librpma way
/// on [`conn`](AsyncConn::conn) complete through
/// [`next_completion`](AsyncConn::next_completion). The CQs are armed
/// only while something waits, so such an operation's completion is taken
/// from its CQ by the next look into it (a `next_completion`, an awaited
/// operation, or the reaper while a future waits): until then its local
/// region stays held and its send queue slot taken. Await
/// `next_completion` to have each taken as it comes.
///
/// Op contexts stay the caller's: an operation posted on
/// [`conn`](AsyncConn::conn) completes through `next_completion` with the
/// op context it was given, whatever its value (even one equal to an
/// awaited operation's), since awaited operations are known by how rpma
/// recorded them, never by their context or immediate data. The
/// connection's events are the handle's too: [`Conn::next_event`] on
/// `conn()` refuses ([`Error::Inval`]); await
/// [`next_event`](AsyncConn::next_event). Wakers run after the routing
/// lock is let go, so a waker may poll or drop this connection's futures.
///
/// The connection's CQs may each have a channel or share one
/// ([`ConnCfg::set_compl_channel`]). A connection receiving through an
/// [`Srq`](crate::Srq) posts its receives there ([`Srq::recv`](crate::Srq::recv));
/// their completions come through `next_completion` when the SRQ has no
/// receive CQ of its own, else from the SRQ's
/// ([`AsyncCq`](super::AsyncCq) over [`Srq::rcq`](crate::Srq::rcq)).
///
/// **Cancellation is harmless**: a future dropped before it is polled
/// posts nothing; dropped after the post, its operation still runs, its
/// local region stays held until the device completes it (the connection's
/// in-flight tracker holds it, as for [`Conn::post`]), and the reaper
/// discards its completion; no other operation's completion is lost, and
/// `Drop` never blocks. A future waits as long as the device takes: bound
/// it with `tokio::time::timeout` (a peer that vanishes is not always
/// reported by the device; dropping the timed-out future is harmless).
///
/// ```no_run
/// # #[allow(dead_code)]
/// # async fn f(peer: &rpma::Peer, addr: &str) -> rpma::Result<()> {
/// use rpma::{AlignedBuf, MrLocal, MrRemote, Usage};
/// let conn = rpma::aio::AsyncConn::connect(peer, addr, 7204, None, &[]).await?;
/// let src = MrRemote::from_descriptor(conn.conn().private_data())?;
/// let dst = MrLocal::reg(peer, AlignedBuf::new(4096)?, Usage::READ_DST)?;
/// let task = tokio::spawn(async move {
///     let wc = conn.read(&dst, 0, &src, 0, 8).await?;
///     assert!(wc.status.is_success());
///     conn.disconnect().await
/// });
/// task.await.expect("the task ran")?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncConn {
    // Field order: the connection (with the last reference) goes before
    // the link to a shared reaper, whose drop then wakes that reaper for
    // the completions the connection's drain set aside.
    shared: Arc<Shared>,
    reaper: Reaper,
}

/// Who reaps an [`AsyncConn`]'s completions.
#[derive(Debug)]
enum Reaper {
    /// Its own task.
    Own(AbortHandle),
    /// An [`AsyncSharedCq`](super::AsyncSharedCq)'s task; the link is
    /// kept for its drop (leaving the routing table).
    Hub { _link: super::shared::HubLink },
}

impl Drop for AsyncConn {
    fn drop(&mut self) {
        // The reaper ends at its next await; the connection is dropped with
        // the last reference (its own rules keep memory the device may
        // reach).
        if let Reaper::Own(r) = &self.reaper {
            r.abort();
        }
    }
}

impl AsyncConn {
    /// Takes `conn` and starts its reaper on the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::Inval`] outside a tokio runtime; [`Error::NoSupp`] for a
    /// connection on a [`SharedCq`](crate::SharedCq) (attach it with
    /// [`AsyncSharedCq::attach`](super::AsyncSharedCq::attach));
    /// [`Error::Provider`] when the fds cannot be registered.
    pub fn new(mut conn: Conn) -> Result<AsyncConn> {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return Err(super::no_runtime("rpma::aio::AsyncConn: made only inside a tokio runtime".to_string()));
        };
        conn.hand_to_reaper(None)?;
        let shared = Shared::new(conn, true)?;
        let reaper = rt.spawn(reap(shared.clone())).abort_handle();
        Ok(AsyncConn { shared, reaper: Reaper::Own(reaper) })
    }

    /// A connection whose completions `hub`'s reaper routes (made by
    /// [`AsyncSharedCq::attach`](super::AsyncSharedCq::attach)).
    pub(super) fn on_hub(mut conn: Conn, hub: &super::AsyncSharedCq) -> Result<AsyncConn> {
        // Outside a runtime, registering the event fd refuses (Inval).
        conn.hand_to_reaper(Some(hub.shared_cq()))?;
        let qp = conn.qp_num();
        let shared = Shared::new(conn, false)?;
        let link = hub.join(qp, &shared)?;
        Ok(AsyncConn { shared, reaper: Reaper::Hub { _link: link } })
    }

    /// Connects to a server (as [`super::connect`]) and takes the
    /// connection.
    ///
    /// # Errors
    /// As [`super::connect`] and [`new`](AsyncConn::new).
    pub async fn connect(peer: &Peer, addr: &str, port: u16, cfg: Option<&ConnCfg>, pdata: &[u8]) -> Result<AsyncConn> {
        AsyncConn::new(super::connect(peer, addr, port, cfg, pdata).await?)
    }

    /// Connects the prepared request `req` (as
    /// [`connect`](AsyncConn::connect) does a new one) and takes the
    /// connection: post receives on `req` first ([`ConnReq::recv`]) when
    /// the other side sends a message at once, e.g. a per-connection
    /// export's descriptor ([`Conn::export`]). Their completions come
    /// through [`next_completion`](AsyncConn::next_completion).
    ///
    /// # Errors
    /// As [`ConnReq::connect`], [`super::connect`] and
    /// [`new`](AsyncConn::new).
    pub async fn connect_req(req: ConnReq, pdata: &[u8]) -> Result<AsyncConn> {
        let conn = req.connect(pdata)?;
        AsyncConn::new(super::established(conn, || "connecting a prepared request".to_string()).await?)
    }

    /// The connection, for what is not awaited here: its private data,
    /// posting the librpma way (whose completions come through
    /// [`next_completion`](AsyncConn::next_completion)), its settings.
    pub fn conn(&self) -> &Conn {
        &self.shared.conn
    }

    /// Posts `op` checked and waits for its completion: the operation's
    /// `flags` get [`Flags::COMPLETION_ALWAYS`](crate::Flags) (its fence
    /// stays), its `op_context` comes back in the completion.
    ///
    /// # Errors
    /// As [`Conn::post`]; [`Error::Provider`] with
    /// [`Detail::Completed`] when the operation completes with an error
    /// status; [`Error::Unknown`] when the reaper stopped (a CQ failed).
    pub fn post<O: Operation>(&self, op: O) -> impl std::future::Future<Output = Result<Completion>> + use<'_, O> {
        let conn = &self.shared.conn;
        self.awaited(move |ctx| conn.post_awaited(op, ctx))
    }

    /// An empty chain of operations on this connection
    /// ([`Conn::chain`]), for [`post_chain`](AsyncConn::post_chain).
    pub fn chain(&self) -> Chain<'_> {
        self.shared.conn.chain()
    }

    /// Appends `last` to `chain`, posts the chain with one call
    /// ([`Chain::post`]) and waits for `last`'s completion, which the
    /// device reports after the operations before it (in order on the
    /// send queue): `last` gets [`Flags::COMPLETION_ALWAYS`](crate::Flags)
    /// (its fence stays), the others keep their flags, and a completion
    /// they report (an error, or one they asked for) comes through
    /// [`next_completion`](AsyncConn::next_completion). A failed
    /// operation before `last` makes `last` complete with
    /// [`WcStatus::WR_FLUSH_ERR`](crate::WcStatus::WR_FLUSH_ERR): an error
    /// here. Afterwards `chain` is empty, also when posting is refused.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// // librpma example 07's commit, awaited: the data, its flush, the
    /// // pointer to it and the pointer's flush, one doorbell.
    /// async fn commit(
    ///     conn: &rpma::aio::AsyncConn,
    ///     log: &rpma::MrRemote,
    ///     src: &rpma::MrLocal<rpma::AlignedBuf>,
    ///     ptr_offset: u64,
    /// ) -> rpma::Result<()> {
    ///     use rpma::ops::{AtomicWrite, Flush, Write};
    ///     use rpma::{Flags, FlushType::Persistent};
    ///     let quiet = Flags::COMPLETION_ON_ERROR;
    ///     let mut chain = conn.chain();
    ///     chain
    ///         .push(Write::new(log, 0, src, 0, 8).flags(quiet))?
    ///         .push(Flush::new(log, 0, 8, Persistent).flags(quiet))?
    ///         .push(AtomicWrite::new(log, ptr_offset, 8u64.to_le_bytes()).flags(quiet))?;
    ///     conn.post_chain(&mut chain, Flush::new(log, ptr_offset, 8, Persistent)).await?;
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`Error::Inval`] when `chain` is another connection's; as
    /// [`Chain::push`] for `last` and [`Chain::post`]; as
    /// [`post`](AsyncConn::post) for the completion.
    pub async fn post_chain<O: Operation>(&self, chain: &mut Chain<'_>, last: O) -> Result<Completion> {
        if !chain.is_on(&self.shared.conn) {
            chain.clear();
            return Err(Error::inval("AsyncConn::post_chain: the chain is another connection's"));
        }
        self.awaited(|ctx| {
            let given = chain.push_awaited(last, ctx);
            let posted = given.and_then(|g| chain.post().map(|()| g));
            if posted.is_err() {
                chain.clear();
            }
            posted
        })
        .await
    }

    /// Runs `post` with the op context of the next routing slot, then
    /// waits for its completion; the completion gets back the op context
    /// `post` returns (the one the operation carried). The post and a
    /// first look into the CQs share one hold of the routing lock, so no
    /// one else can take the completion in between: when it is there the
    /// slot is never taken, else the slot is taken before the lock is let
    /// go. A unit of tokio's budget is spent either way (a task whose
    /// operations complete at once still yields, keeping the completion
    /// it took).
    async fn awaited(&self, post: impl FnOnce(u64) -> Result<u64>) -> Result<Completion> {
        let s = &*self.shared;
        // The post and the first look, under one hold of the routing lock
        // (in a block: the guard is not kept across an await).
        let (k, gen, given, found) = {
            let mut r = s.router();
            let (k, gen) = r.next()?;
            let ctx = ctx_of(k, gen);
            let given = match post(ctx) {
                Ok(c) => c,
                Err(e) => {
                    // Refused before posting: the slot stays free. A
                    // provider's refusal may have queued it: then its slot
                    // waits for the completion, abandoned.
                    if matches!(e, Error::Provider { .. }) {
                        r.take(k, gen);
                        r.abandon(k, gen);
                    }
                    return Err(e);
                }
            };
            // Every poll of the CQs holds the routing lock, held since the
            // post: the completion, when in the CQ already, is found here,
            // and the operation never takes its slot.
            let found = s.poll_cqs(&mut r, Some(ctx), |_| true);
            if found.is_none() {
                r.take(k, gen);
            }
            (k, gen, given, found)
        };
        let mut wc = match found {
            Some(wc) => {
                // A unit of the task's budget, so that a task whose
                // operations complete at once still yields (keeping the
                // completion it took).
                poll_fn(tokio::task::coop::poll_proceed).await.made_progress();
                Ok(wc)
            }
            None => {
                let slot = Awaiting { shared: s, k, gen };
                let wc = poll_fn(|cx| s.poll_routed(cx, Some((k, gen)), |r, cx| r.poll_slot(k, gen, cx))).await;
                // Taken: nothing to abandon (forgotten, not dropped: no
                // drop call on the path every waiting operation takes).
                std::mem::forget(slot);
                wc
            }
        };
        if let Ok(c) = &mut wc {
            c.op_context = given;
            if !c.status.is_success() {
                let text = format!("{:?} (its completion's status: {})", c.op, c.status);
                let op = Msg::detailed(Detail::Completed { status: c.status.0 }, text);
                return Err(Error::Provider { op, source: std::io::Error::from_raw_os_error(libc::EIO) });
            }
        }
        wc
    }

    /// The next completion of an operation posted the librpma way on
    /// [`conn`](AsyncConn::conn) (not awaited). Cancellation-safe: a
    /// completion is taken only in the poll that returns it.
    ///
    /// # Errors
    /// [`Error::Unknown`] when the reaper stopped (a CQ failed).
    pub async fn next_completion(&self) -> Result<Completion> {
        poll_fn(|cx| self.shared.poll_completion(cx)).await
    }

    /// [`next_completion`](AsyncConn::next_completion) as a stream (e.g.
    /// of receives posted the librpma way). It never ends.
    pub fn completions(&self) -> Completions<'_> {
        Completions(&self.shared)
    }

    /// The next connection event ([`Conn::next_event`], awaited).
    /// Cancellation-safe.
    ///
    /// # Errors
    /// As [`Conn::next_event`].
    pub async fn next_event(&self) -> Result<ConnEvent> {
        poll_fn(|cx| self.shared.poll_event(cx)).await
    }

    /// [`next_event`](AsyncConn::next_event) as a stream. It never ends
    /// (stop at the closing event).
    pub fn events(&self) -> Events<'_> {
        Events(&self.shared)
    }

    /// Disconnects ([`Conn::disconnect`]) and waits for the closing event,
    /// unless [`next_event`](AsyncConn::next_event) (or
    /// [`events`](AsyncConn::events)) already took one (the peer closed
    /// first); the connection is released with the handle.
    ///
    /// # Errors
    /// As [`Conn::disconnect`] and [`next_event`](AsyncConn::next_event).
    pub async fn disconnect(self) -> Result<()> {
        let closed = self.shared.closing_seen.load(std::sync::atomic::Ordering::Relaxed);
        self.shared.conn.disconnect()?;
        if !closed {
            while self.next_event().await? == ConnEvent::Established {}
        }
        Ok(())
    }
}

/// An awaited operation's slot while its future lives: dropped before the
/// completion was taken, the slot is abandoned (the reaper frees it when the
/// completion comes) or freed (the completion came). Forgotten once the
/// completion is taken.
struct Awaiting<'a> {
    shared: &'a Shared,
    k: usize,
    gen: u64,
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.shared.router().abandon(self.k, self.gen);
    }
}

/// [`AsyncConn::completions`]: the completions of operations posted the
/// librpma way, as a stream.
#[derive(Debug)]
pub struct Completions<'a>(&'a Shared);

impl futures_core::Stream for Completions<'_> {
    type Item = Result<Completion>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_completion(cx).map(Some)
    }
}

/// [`AsyncConn::events`]: the connection's events, as a stream.
#[derive(Debug)]
pub struct Events<'a>(&'a Shared);

impl futures_core::Stream for Events<'_> {
    type Item = Result<ConnEvent>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_event(cx).map(Some)
    }
}
