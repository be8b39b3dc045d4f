//! Device tests of `rpma::aio::AsyncConn` (feature `tokio`): operations
//! awaited on owned connections, moved into spawned tasks; futures dropped
//! at every stage; the librpma-style calls beside them; on a real RDMA
//! device (rxe in the harness VM).

mod common;
use common::{peer, raise_fd_limit, T};
use rpma::aio::AsyncConn;
use rpma::conn::ConnEvent;
use rpma::error::{Detail, RangeUse};
use rpma::{AlignedBuf, Ep, Flags, FlushType, MrLocal, MrRemote, MwAccess, Peer, Usage};
use rpma_harness::{addr, device_tests, next_port};
use std::sync::Arc;
use std::time::Duration;

/// One current-thread runtime: every spawned task runs on the test's
/// thread (`tokio::spawn` still asks for `Send + 'static`).
fn run<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(300), f).await.expect("the test took over 300 s") })
}

/// The next item of a stream that never ends.
async fn next<S: futures_core::Stream + Unpin>(s: &mut S) -> S::Item {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await.expect("the stream never ends")
}

/// Polls the awaited operation `f` once, with the task's cooperative
/// budget spent: true if it was pending. An awaited operation posts on
/// its first poll, looks for its completion and spends a unit of tokio's
/// budget, so with none left it is pending right after its post, however
/// fast the device (rxe often completes before the post returns: the
/// future then holds its completion; an operation that cannot complete
/// yet is `an_operation_waiting_for_the_peer_outlives_its_dropped_future`).
async fn posted_and_pending<F: std::future::Future>(f: F) -> bool {
    use std::task::Poll;
    use tokio::task::coop::poll_proceed;
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let mut units = 0;
        while let Poll::Ready(spent) = poll_proceed(cx) {
            spent.made_progress();
            units += 1;
            assert!(units < 100_000, "the task's budget is unconstrained");
        }
        Poll::Ready(f.as_mut().poll(cx).is_pending())
    })
    .await
}

/// A blocking server on its own thread: accepts `n` connections with
/// `pdata`, each then waited for on a thread of its own until it closes
/// (rxe's CM reports a client's disconnect to the client only once the
/// server disconnected too, so clients that leave while others still
/// arrive need their server side to answer at once).
fn serve(sp: &Peer, port: u16, n: usize, pdata: Vec<u8>) -> std::thread::JoinHandle<()> {
    let ep = Ep::listen(sp, &addr(), port).unwrap();
    std::thread::spawn(move || {
        let each: Vec<_> = (0..n)
            .map(|_| {
                let c = ep.next_conn_req(None).unwrap().connect(&pdata).unwrap();
                std::thread::spawn(move || {
                    while c.next_event().unwrap() == ConnEvent::Established {}
                    let _ = c.disconnect();
                })
            })
            .collect();
        for t in each {
            t.join().unwrap();
        }
    })
}

/// `desc` (librpma's descriptor) with its rkey (bytes 16..20) forged: the
/// device refuses it.
fn forged_rkey(desc: &[u8]) -> Vec<u8> {
    let mut d = desc.to_vec();
    d[16] ^= 0x5a;
    d
}

device_tests!({
    /// The awaited verbs with immediate data: a write and a send, each
    /// consuming a receive the server posted before connecting, whose
    /// completion carries the value.
    fn immediate_data_awaited_with_write_and_send() {
        use rpma::ops::Recv;
        use rpma::CompletionOp;
        let (sp, cp) = (peer(), peer());
        let target = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::WRITE_DST | Usage::RECV).unwrap();
        let port = next_port();
        let ep = Ep::listen(&sp, &addr(), port).unwrap();
        let server = std::thread::spawn(move || {
            let req = ep.next_conn_req(None).unwrap();
            req.post(Recv::new(&target, 1024, 64).op_context(1)).unwrap();
            req.post(Recv::new(&target, 2048, 64).op_context(2)).unwrap();
            let c = req.connect(&target.descriptor()).unwrap();
            assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Established);
            let got: Vec<_> = (0..2)
                .map(|_| {
                    let wc = c.cq().next_completion(T).unwrap();
                    assert!(wc.status.is_success(), "{wc:?}");
                    (wc.op_context, wc.op, wc.imm, wc.byte_len)
                })
                .collect();
            assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Closed);
            let _ = c.disconnect();
            let mut b = [0u8; 8];
            target.read_at(0, &mut b).unwrap();
            assert_eq!(&b, b"with-imm");
            target.read_at(2048, &mut b).unwrap();
            assert_eq!(&b, b"sent-imm");
            got
        });
        run(async move {
            let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap();
            let remote = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
            let src = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC | Usage::SEND).unwrap();
            src.write_at(0, b"with-imm").unwrap();
            src.write_at(8, b"sent-imm").unwrap();
            let w = conn.write_with_imm(&remote, 0, &src, 0, 8, 0xfeed).await.unwrap();
            assert_eq!(w.op, CompletionOp::WriteWithImm);
            let sent = conn.send_with_imm(&src, 8, 8, 0xbeef).await.unwrap();
            assert_eq!(sent.op, CompletionOp::SendWithImm);
            conn.disconnect().await.unwrap();
        });
        let got = server.join().unwrap();
        assert_eq!(
            got,
            [(1, CompletionOp::RecvRdmaWithImm, Some(0xfeed), 8), (2, CompletionOp::Recv, Some(0xbeef), 8)]
        );
        println!("  awaited write_with_imm and send_with_imm: {got:?}");
    }

    fn two_hundred_fifty_six_connections_as_spawned_tasks_every_byte_verified() {
        const N: usize = 256;
        const SLOT: usize = 128;
        // Both ends of 256 connections take about 1,500 fds (a completion
        // channel and a CM event channel each).
        let fds = raise_fd_limit(4096);
        assert!(fds >= 4096, "the open-file limit {fds} is below 4,096");
        let (sp, cp) = (peer(), peer());
        let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY | Usage::REMOTE_ATOMIC;
        let region = MrLocal::reg(&sp, AlignedBuf::new(N * SLOT + 8).unwrap(), usage).unwrap();
        let port = next_port();
        let server = serve(&sp, port, N, region.descriptor_ext());
        run(async move {
            let tasks: Vec<_> = (0..N)
                .map(|i| {
                    let cp = cp.clone();
                    tokio::spawn(async move {
                        let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.expect("connect");
                        let dst = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
                        let src = MrLocal::reg(&cp, AlignedBuf::new(SLOT).unwrap(), Usage::WRITE_SRC).unwrap();
                        let back = MrLocal::reg(&cp, AlignedBuf::new(SLOT + 8).unwrap(), Usage::READ_DST).unwrap();
                        let bytes: Vec<u8> = (0..SLOT).map(|k| (i * 31 + k) as u8).collect();
                        src.write_at(0, &bytes).unwrap();
                        let at = (i * SLOT) as u64;
                        // The first 8 bytes by an atomic write, the rest by a write.
                        conn.atomic_write(&dst, at, bytes[..8].try_into().unwrap()).await.unwrap();
                        conn.write(&dst, at + 8, &src, 8, SLOT - 8).await.unwrap();
                        conn.flush(&dst, at, SLOT as u64, FlushType::Visibility).await.unwrap();
                        let wc = conn.read(&back, 0, &dst, at, SLOT).await.unwrap();
                        assert!(wc.status.is_success());
                        let mut got = vec![0u8; SLOT];
                        back.read_at(0, &mut got).unwrap();
                        assert_eq!(got, bytes, "connection {i} read back");
                        let old = conn.fetch_and_add(&back, SLOT, &dst, (N * SLOT) as u64, 1).await.unwrap();
                        assert!(old < N as u64, "{old}");
                        conn.disconnect().await.unwrap();
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        server.join().unwrap();
        let mut all = vec![0u8; N * SLOT + 8];
        region.read_at(0, &mut all).unwrap();
        for i in 0..N {
            let want: Vec<u8> = (0..SLOT).map(|k| (i * 31 + k) as u8).collect();
            assert_eq!(&all[i * SLOT..(i + 1) * SLOT], &want[..], "the server's slot {i}");
        }
        assert_eq!(u64::from_le_bytes(all[N * SLOT..].try_into().unwrap()), N as u64, "every fetch-and-add landed");
        println!("  {N} connections as spawned tasks: every byte and the counter verified at the server");
    }

    fn futures_dropped_at_every_stage_lose_nothing() {
        let (sp, cp) = (peer(), peer());
        let usage = Usage::WRITE_DST | Usage::READ_SRC;
        let region = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), usage).unwrap();
        region.write_at(0, &[7u8; 4096]).unwrap();
        let port = next_port();
        let server = serve(&sp, port, 1, region.descriptor().to_vec());
        run(async move {
            let conn = Arc::new(AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap());
            let src = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
            let dst = MrLocal::reg(&cp, AlignedBuf::new(4096).unwrap(), Usage::READ_DST).unwrap();

            // Before the post: nothing posted.
            drop(conn.read(&dst, 0, &src, 0, 4096));
            assert_eq!(conn.conn().pending_sends(), 0);

            // After the post: the operation runs on; its region stays held
            // (rpma refuses to write it) until the device completes it.
            assert!(posted_and_pending(conn.read(&dst, 0, &src, 0, 4096)).await);
            let e = dst.write_at(0, &[0u8; 8]);
            // Either still in flight (held), or already completed (its
            // completion dropped with the future, or discarded by the
            // reaper): never both written.
            if let Err(e) = &e {
                assert!(matches!(e.detail(), Some(Detail::RangeBusy { by: RangeUse::DeviceWrites, .. })), "{e}");
            }
            // The next operations' completions all arrive.
            for k in 0..16u64 {
                let wc = conn.read(&dst, 0, &src, 0, 64).await.unwrap();
                assert!(wc.status.is_success(), "read {k}: {wc:?}");
            }
            dst.write_at(0, &[0u8; 8]).expect("no operation holds the region now");
            let mut got = [0u8; 64];
            dst.read_at(8, &mut got[..56]).unwrap();
            assert_eq!(got[..56], [7u8; 56], "the reads landed");
            // Only the dropped read wrote past the first 64 bytes: it was
            // posted on its one poll (the budget is spent after the post).
            let mut tail = vec![0u8; 4096 - 64];
            dst.read_at(64, &mut tail).unwrap();
            assert!(tail.iter().all(|&b| b == 7), "the read whose future was dropped after its post landed");

            // After the completion arrived, before it was polled: a later
            // operation completes, and the first's completion (taken by its
            // future, or routed to its slot) goes with the dropped future.
            let first = conn.read(&dst, 0, &src, 0, 64);
            let mut first = Box::pin(first);
            assert!(posted_and_pending(first.as_mut()).await);
            conn.read(&dst, 64, &src, 64, 64).await.unwrap();
            drop(first);
            let wc = conn.read(&dst, 128, &src, 128, 64).await.unwrap();
            assert!(wc.status.is_success());

            // Beside them, the librpma way: its completion comes through
            // next_completion, with its op context.
            conn.conn().read(&dst, 256, &src, 256, 64, Flags::COMPLETION_ALWAYS, 77).unwrap();
            let wc = tokio::time::timeout(Duration::from_secs(10), conn.next_completion()).await.unwrap().unwrap();
            assert_eq!(wc.op_context, 77);
            // ... and the reaper's CQ refuses other readers.
            let e = conn.conn().cq().get_completion().unwrap_err();
            assert_eq!(e.detail(), Some(&Detail::Reaped), "{e}");

            // Many in flight at once, from several tasks sharing the handle.
            let tasks: Vec<_> = (0..8u64)
                .map(|t| {
                    let conn = conn.clone();
                    let cp = cp.clone();
                    tokio::spawn(async move {
                        let d = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
                        for _ in 0..32 {
                            let wc = conn.read(&d, 0, &src, t * 64, 64).await.unwrap();
                            assert!(wc.status.is_success());
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let conn = Arc::into_inner(conn).expect("the tasks are done");
            conn.disconnect().await.unwrap();
        });
        server.join().unwrap();
    }

    /// Operations posted the librpma way with op contexts shaped as the
    /// awaited operations' tags (a marker bit, a generation, a slot: the
    /// first ones predictable) never complete an awaited future, and an
    /// abandoned slot never eats their completions: each awaited operation
    /// gets its own completion (a large read its bytes landed, a
    /// compare-and-swap the value it found), each user operation's
    /// completion comes through `next_completion` with its context.
    fn user_op_contexts_never_reach_an_awaited_future() {
        const BIG: usize = 4 << 20;
        let (sp, cp) = (peer(), peer());
        let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::REMOTE_ATOMIC;
        let region = MrLocal::reg(&sp, AlignedBuf::new(BIG + 64).unwrap(), usage).unwrap();
        let pattern: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
        region.write_at(0, &pattern).unwrap();
        let port = next_port();
        let server = serve(&sp, port, 1, region.descriptor_ext());
        run(async move {
            let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap();
            let remote = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
            let big = MrLocal::reg(&cp, AlignedBuf::new(BIG).unwrap(), Usage::READ_DST).unwrap();
            let small = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC | Usage::READ_DST).unwrap();
            // Tags of every shape the router has used: marker bit 63, a
            // 43-bit generation above a 20-bit slot; the n-th awaited
            // operation (one at a time) is slot 0, generation n.
            let tag = |gen: u64| 1u64 << 63 | gen << 20;
            let user_write = |ctx: u64| {
                conn.conn().write(&remote, (BIG + 32) as u64, &small, 0, 8, Flags::COMPLETION_ALWAYS, ctx).unwrap();
            };
            let mut users = Vec::new();
            // 1. A large awaited read after a user's write tagged as it.
            user_write(tag(0));
            users.push(tag(0));
            let wc = conn.read(&big, 0, &remote, 0, BIG).await.unwrap();
            assert_eq!(wc.op, rpma::CompletionOp::Read, "the read's own completion: {wc:?}");
            let mut got = vec![0u8; BIG];
            big.read_at(0, &mut got).expect("nothing holds the region: the read is done");
            assert!(got == pattern, "the read's bytes landed before its future returned");
            // 2. A compare-and-swap after a user's write tagged as it.
            let cas_at = (BIG + 48) as u64;
            for (gen, (compare, swap)) in [(1u64, (0u64, 5u64)), (2, (5, 9)), (3, (1, 2))] {
                user_write(tag(gen));
                users.push(tag(gen));
                let old = conn.compare_and_swap(&small, 16, &remote, cas_at, compare, swap).await.unwrap();
                assert_eq!(old, if gen == 3 { 9 } else { compare }, "generation {gen}: the value the swap found");
            }
            // 3. A user's completion tagged as an abandoned slot's: the
            // user's write first, then the awaited read, dropped after its
            // post (its slot abandoned until its completion comes).
            user_write(tag(4));
            users.push(tag(4));
            assert!(posted_and_pending(conn.read(&big, 0, &remote, 0, BIG)).await);
            // The later awaited operations still get their own.
            let wc = conn.read(&small, 32, &remote, 0, 8).await.unwrap();
            assert_eq!(wc.op, rpma::CompletionOp::Read);
            // Every user completion, once, with its context and kind.
            for want in users {
                let wc =
                    tokio::time::timeout(T, conn.next_completion()).await.expect("a user completion is lost").unwrap();
                assert_eq!((wc.op_context, wc.op), (want, rpma::CompletionOp::Write));
            }
            let extra = tokio::time::timeout(Duration::from_millis(300), conn.next_completion()).await;
            assert!(extra.is_err(), "no awaited completion reaches the user: {extra:?}");
            conn.disconnect().await.unwrap();
        });
        server.join().unwrap();
    }

    /// A waker that polls, then drops, another future of the same
    /// connection when it is woken (the runtime's or the user's code may
    /// do either): the reaper wakes it after letting the routing lock go,
    /// so nothing spins on that lock. (Woken under the lock, the reaper's
    /// thread spun for ever and no timeout could fire.)
    fn a_waker_that_polls_the_same_connection_runs_outside_its_lock() {
        use std::future::Future;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Mutex;
        use std::task::{Context, Poll, Wake, Waker};
        type Fut = std::pin::Pin<Box<dyn Future<Output = rpma::Result<rpma::Completion>> + Send>>;
        struct Reentrant {
            other: Mutex<Option<Fut>>,
            woken: AtomicUsize,
        }
        impl Wake for Reentrant {
            fn wake(self: Arc<Self>) {
                self.wake_by_ref()
            }
            fn wake_by_ref(self: &Arc<Self>) {
                // Poll another awaited operation of the same connection
                // (it posts and looks into the CQs: the routing lock), then
                // drop it (abandoning its slot: the lock again).
                if let Some(mut f) = self.other.lock().unwrap().take() {
                    let _ = f.as_mut().poll(&mut Context::from_waker(Waker::noop()));
                    drop(f);
                }
                self.woken.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::READ_SRC | Usage::SEND).unwrap();
        let port = next_port();
        let ep = Ep::listen(&sp, &addr(), port).unwrap();
        let (go, went) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let c = ep.next_conn_req(None).unwrap().connect(&region.descriptor()).unwrap();
            assert_eq!(c.next_event_timeout(T).unwrap(), ConnEvent::Established);
            went.recv_timeout(Duration::from_secs(120)).unwrap();
            c.send(&region, 0, 8, Flags::COMPLETION_ALWAYS, 1).unwrap();
            c.cq().next_completion(T).unwrap();
            while c.next_event().unwrap() == ConnEvent::Established {}
            let _ = c.disconnect();
        });
        // The runtime on a thread of its own: a spin there must fail the
        // test, not hang it.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            run(async move {
                let conn = Arc::new(AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap());
                let remote = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
                let inbox = Arc::new(MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap());
                let dst = Arc::new(MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap());
                let (c2, d2) = (conn.clone(), dst.clone());
                let other: Fut = Box::pin(async move { c2.read(&d2, 0, &remote, 0, 8).await });
                let waker = Arc::new(Reentrant { other: Mutex::new(Some(other)), woken: AtomicUsize::new(0) });
                // The receive waits for the peer's send, with that waker.
                let (c3, i3) = (conn.clone(), inbox.clone());
                let mut recv = Box::pin(async move { c3.recv(&i3, 0, 64).await });
                let w = Waker::from(waker.clone());
                assert!(recv.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
                go.send(()).unwrap();
                while waker.woken.load(Ordering::SeqCst) == 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                let wc = match recv.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(wc) => wc.unwrap(),
                    Poll::Pending => panic!("woken before its completion was routed"),
                };
                assert_eq!(wc.byte_len, 8);
                drop(recv);
                let conn = Arc::into_inner(conn).expect("the futures are gone");
                conn.disconnect().await.unwrap();
            });
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the runtime's thread hung: a waker ran under the routing lock");
        server.join().unwrap();
    }

    /// Fds made blocking again behind the async handle's back (any safe
    /// code can: `utils::set_nonblocking`, or a duplicate's flags) never
    /// block the runtime: every async read polls its fd first. And the
    /// connection's events are the handle's: `conn().next_event()`
    /// refuses, so `disconnect` always sees the closing event.
    fn blocking_fds_never_block_the_runtime() {
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::READ_SRC).unwrap();
        let port = next_port();
        let server = serve(&sp, port, 1, region.descriptor().to_vec());
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            run(async move {
                let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap();
                let remote = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
                let dst = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
                rpma::utils::set_nonblocking(conn.conn(), false).unwrap();
                rpma::utils::set_nonblocking(conn.conn().cq(), false).unwrap();
                for _ in 0..16 {
                    conn.read(&dst, 0, &remote, 0, 8).await.unwrap();
                }
                let quiet = tokio::time::timeout(Duration::from_millis(200), conn.next_event()).await;
                assert!(quiet.is_err(), "no event yet: the wait times out, the runtime runs: {quiet:?}");
                let quiet = tokio::time::timeout(Duration::from_millis(200), conn.next_completion()).await;
                assert!(quiet.is_err(), "no completion: {quiet:?}");
                let e = conn.conn().next_event().unwrap_err();
                assert!(matches!(e, rpma::Error::Inval(_)), "{e}");
                conn.disconnect().await.unwrap();
            });
            done.send(()).unwrap();
        });
        finished.recv_timeout(Duration::from_secs(60)).expect("the runtime blocked on a blocking fd");
        server.join().unwrap();
    }

    fn an_operation_waiting_for_the_peer_outlives_its_dropped_future() {
        // A send that finds no receive posted at the other side waits (RNR
        // retries without end) until one comes: its future is pending with
        // the operation in flight however fast the device. Dropped then,
        // the send still completes once the receive is posted, its region
        // stays held until the reaper has taken that completion, which
        // nobody is told of; the next awaited operations complete, one of
        // them waiting for the peer on a CQ the reaper left unarmed.
        let (sp, cp) = (peer(), peer());
        let (c, s) = common::Pair::new().server_peer(&sp).client_peer(&cp).connect();
        let rbuf = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
        run(async move {
            use std::future::Future;
            use std::task::Poll;
            let a = AsyncConn::new(c).unwrap();
            let msg = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::SEND).unwrap();
            msg.write_at(0, &[0x11; 64]).unwrap();
            let mut fut = Box::pin(a.send(&msg, 0, 64));
            let pending = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_pending())).await;
            assert!(pending, "no receive posted: the send cannot have completed");
            tokio::time::sleep(Duration::from_millis(50)).await;
            let pending = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_pending())).await;
            assert!(pending, "still waiting for the receive");
            drop(fut);
            let e = msg.write_at(0, &[0x22; 64]).unwrap_err();
            assert!(matches!(e.detail(), Some(Detail::RangeBusy { by: RangeUse::DeviceReads, .. })), "{e}");
            s.recv(&rbuf, 0, 64, 5).unwrap();
            let wc = s.cq().next_completion(T).unwrap();
            assert!(wc.status.is_success() && wc.op_context == 5 && wc.byte_len == 64, "{wc:?}");
            let mut got = [0u8; 64];
            rbuf.read_at(0, &mut got).unwrap();
            assert_eq!(got, [0x11; 64], "the dropped future's send arrived whole");
            // The reaper takes the discarded completion; the hold ends.
            let t0 = std::time::Instant::now();
            while msg.write_at(0, &[0x33; 64]).is_err() {
                assert!(t0.elapsed() < T, "the region is still held");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // Nothing waited when the reaper took that completion's event,
            // so it left the CQ unarmed: a send that must wait for the peer
            // arms it, and its completion raises the event that wakes it.
            let late = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                s.recv(&rbuf, 0, 64, 7).unwrap();
                (s, rbuf)
            });
            assert!(a.send(&msg, 0, 64).await.unwrap().status.is_success());
            let (s, rbuf) = late.join().unwrap();
            assert_eq!(s.cq().next_completion(T).unwrap().op_context, 7);
            let quiet = tokio::time::timeout(Duration::from_millis(200), a.next_completion()).await;
            assert!(quiet.is_err(), "the discarded completion was reported: {quiet:?}");
            s.recv(&rbuf, 0, 64, 6).unwrap();
            assert!(a.send(&msg, 0, 64).await.unwrap().status.is_success());
            let wc = s.cq().next_completion(T).unwrap();
            assert_eq!(wc.op_context, 6);
            rbuf.read_at(0, &mut got).unwrap();
            assert_eq!(got, [0x33; 64]);
            drop((a, s));
        });
    }

    fn many_futures_on_one_connection_on_two_worker_threads_each_woken() {
        // 32 tasks on two worker threads keep awaited
        // writes and reads in flight on one connection while another task
        // takes, through next_completion, the completions of writes posted
        // the librpma way; every byte is checked.
        const TASKS: u64 = 32;
        const ROUNDS: u64 = 16;
        const SLOT: u64 = 64;
        let (sp, cp) = (peer(), peer());
        let usage = Usage::WRITE_DST | Usage::READ_SRC;
        let region = MrLocal::reg(&sp, AlignedBuf::new((2 * TASKS * SLOT) as usize).unwrap(), usage).unwrap();
        let port = next_port();
        let server = serve(&sp, port, 1, region.descriptor().to_vec());
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let mut cfg = rpma::ConnCfg::new();
            cfg.set_sq_size(2 * TASKS as u32 + 2);
            cfg.set_cq_size(4 * TASKS as u32 + 4);
            let conn = Arc::new(AsyncConn::connect(&cp, &addr(), port, Some(&cfg), &[]).await.unwrap());
            let dst = Arc::new(MrRemote::from_descriptor(conn.conn().private_data()).unwrap());
            // The librpma way: writes into the second half, their
            // completions taken by one task through next_completion.
            let plain = {
                let (conn, dst, cp) = (conn.clone(), dst.clone(), cp.clone());
                tokio::spawn(async move {
                    let src = MrLocal::reg(&cp, AlignedBuf::new(SLOT as usize).unwrap(), Usage::WRITE_SRC).unwrap();
                    for k in 0..TASKS {
                        src.write_at(0, &[k as u8 ^ 0xa5; SLOT as usize]).unwrap();
                        let at = (TASKS + k) * SLOT;
                        conn.conn()
                            .write(&dst, at, &src, 0, SLOT as usize, Flags::COMPLETION_ALWAYS, 1000 + k)
                            .unwrap();
                        let wc = tokio::time::timeout(Duration::from_secs(60), conn.next_completion()).await;
                        let wc = wc.expect("next_completion woken").unwrap();
                        assert_eq!((wc.op_context, wc.status.is_success()), (1000 + k, true));
                    }
                })
            };
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let (conn, dst, cp) = (conn.clone(), dst.clone(), cp.clone());
                    tokio::spawn(async move {
                        let src = MrLocal::reg(&cp, AlignedBuf::new(SLOT as usize).unwrap(), Usage::WRITE_SRC).unwrap();
                        let back = MrLocal::reg(&cp, AlignedBuf::new(SLOT as usize).unwrap(), Usage::READ_DST).unwrap();
                        for r in 0..ROUNDS {
                            let bytes = [(t * 7 + r) as u8; SLOT as usize];
                            src.write_at(0, &bytes).unwrap();
                            conn.write(&dst, t * SLOT, &src, 0, SLOT as usize).await.unwrap();
                            conn.read(&back, 0, &dst, t * SLOT, SLOT as usize).await.unwrap();
                            let mut got = [0u8; SLOT as usize];
                            back.read_at(0, &mut got).unwrap();
                            assert_eq!(got, bytes, "task {t} round {r}");
                        }
                    })
                })
                .collect();
            for t in tasks {
                tokio::time::timeout(Duration::from_secs(120), t).await.expect("every future woken").unwrap();
            }
            plain.await.unwrap();
            let conn = Arc::into_inner(conn).expect("the tasks are done");
            conn.disconnect().await.unwrap();
        });
        server.join().unwrap();
        let mut all = vec![0u8; (2 * TASKS * SLOT) as usize];
        region.read_at(0, &mut all).unwrap();
        for t in 0..TASKS {
            let (a, b) = ((t * SLOT) as usize, (TASKS * SLOT + t * SLOT) as usize);
            assert!(all[a..a + SLOT as usize].iter().all(|&x| x == (t * 7 + ROUNDS - 1) as u8), "awaited slot {t}");
            assert!(all[b..b + SLOT as usize].iter().all(|&x| x == t as u8 ^ 0xa5), "plain slot {t}");
        }
        println!("  {TASKS} tasks x {ROUNDS} rounds awaited on one connection, {TASKS} librpma-style writes beside");
    }

    fn an_error_completion_is_an_error_with_the_completion() {
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::READ_SRC).unwrap();
        let port = next_port();
        let server = serve(&sp, port, 1, region.descriptor().to_vec());
        let desc = forged_rkey(&region.descriptor());
        run(async move {
            let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap();
            let forged = MrRemote::from_descriptor(&desc).unwrap();
            let dst = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
            let e = conn.read(&dst, 0, &forged, 0, 8).await.unwrap_err();
            match e.detail() {
                Some(Detail::Completed { status }) => assert!(!rpma::WcStatus(*status).is_success(), "{status}"),
                other => panic!("{e}: {other:?}"),
            }
            println!("  a forged rkey: {e}");
            drop(conn);
        });
        server.join().unwrap();
    }

    fn streams_of_requests_events_and_completions() {
        let (sp, cp) = (peer(), peer());
        let port = next_port();
        let ep = Ep::listen(&sp, &addr(), port).unwrap();
        let rbuf = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
        run(async move {
            let client = tokio::spawn(async move {
                let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap();
                let msg = MrLocal::reg(&cp, AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
                msg.write_at(0, b"streamed").unwrap();
                conn.send(&msg, 0, 8).await.unwrap();
                conn.disconnect().await.unwrap();
            });
            let mut requests = rpma::aio::AsyncEp::new(&ep).unwrap();
            let req = next(&mut requests).await.unwrap();
            // The receive goes first, posted the librpma way on the request.
            req.recv(&rbuf, 0, 8, 5).unwrap();
            let conn = AsyncConn::new(req.connect(&[]).unwrap()).unwrap();
            let mut events = conn.events();
            assert_eq!(next(&mut events).await.unwrap(), ConnEvent::Established);
            let wc = next(&mut conn.completions()).await.unwrap();
            assert!(wc.status.is_success() && wc.op_context == 5 && wc.byte_len == 8, "{wc:?}");
            let mut got = [0u8; 8];
            rbuf.read_at(0, &mut got).unwrap();
            assert_eq!(&got, b"streamed");
            assert_eq!(next(&mut events).await.unwrap(), ConnEvent::Closed);
            // The peer closed first: no event is waited for. (The client's
            // own closing event waits for this disconnect: rxe's CM sends
            // it only then, or after its ~100 s timeout.)
            conn.disconnect().await.unwrap();
            client.await.unwrap();
        });
    }

    fn connections_come_and_go_on_one_shared_reaper() {
        // Three waves of 8 connections on one SharedCq and one reaper,
        // beside a connection that lives through all of them: each writes
        // its slot and reads it back (every byte checked), drops one
        // awaited read after its post, and leaves; the next wave may get
        // the QP numbers of the last.
        const WAVES: usize = 3;
        const PER: usize = 8;
        const SLOT: usize = 256;
        let (sp, cp) = (peer(), peer());
        let usage = Usage::WRITE_DST | Usage::READ_SRC;
        let region = MrLocal::reg(&sp, AlignedBuf::new((WAVES * PER + 1) * SLOT).unwrap(), usage).unwrap();
        let port = next_port();
        let server = serve(&sp, port, WAVES * PER + 1, region.descriptor().to_vec());
        let scq = rpma::SharedCq::new(&cp, 1024).unwrap();
        let scq2 = scq.clone();
        run(async move {
            let hub = rpma::aio::AsyncSharedCq::new(&scq).unwrap();
            let e = rpma::aio::AsyncSharedCq::new(&scq).unwrap_err();
            assert!(matches!(e, rpma::Error::Inval(_)), "a second hub: {e}");
            let mut cfg = rpma::ConnCfg::new();
            cfg.set_shared_cq(Some(&scq));
            let lives = hub.attach(rpma::aio::connect(&cp, &addr(), port, Some(&cfg), &[]).await.unwrap()).unwrap();
            let lives = Arc::new(lives);
            // The hub's CQ refuses other readers.
            let e = scq.get_completion().unwrap_err();
            assert!(matches!(e, rpma::Error::Inval(_)), "{e}");
            let exchange = |conn: Arc<AsyncConn>, at: usize, seed: usize, cp: Peer| async move {
                let dst = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
                let src = MrLocal::reg(&cp, AlignedBuf::new(SLOT).unwrap(), Usage::WRITE_SRC).unwrap();
                let back = MrLocal::reg(&cp, AlignedBuf::new(SLOT).unwrap(), Usage::READ_DST).unwrap();
                let bytes: Vec<u8> = (0..SLOT).map(|k| (seed * 37 + k) as u8).collect();
                src.write_at(0, &bytes).unwrap();
                conn.write(&dst, (at * SLOT) as u64, &src, 0, SLOT).await.unwrap();
                // Dropped after its post: its completion is discarded.
                assert!(posted_and_pending(conn.read(&back, 0, &dst, (at * SLOT) as u64, SLOT)).await);
                let wc = conn.read(&back, 0, &dst, (at * SLOT) as u64, SLOT).await.unwrap();
                assert!(wc.status.is_success());
                let mut got = vec![0u8; SLOT];
                back.read_at(0, &mut got).unwrap();
                assert_eq!(got, bytes, "slot {at} read back");
            };
            let mut qps = std::collections::BTreeSet::new();
            for wave in 0..WAVES {
                let tasks: Vec<_> = (0..PER)
                    .map(|i| {
                        let (cp, hub, cfg) = (cp.clone(), hub.clone(), cfg.clone());
                        let at = 1 + wave * PER + i;
                        tokio::spawn(async move {
                            let c = rpma::aio::connect(&cp, &addr(), port, Some(&cfg), &[]).await.unwrap();
                            let conn = Arc::new(hub.attach(c).unwrap());
                            let qp = conn.conn().qp_num();
                            exchange(conn.clone(), at, at, cp).await;
                            Arc::into_inner(conn).unwrap().disconnect().await.unwrap();
                            qp
                        })
                    })
                    .collect();
                // The long-lived connection works while the wave runs.
                exchange(lives.clone(), 0, 1000 + wave, cp.clone()).await;
                for t in tasks {
                    qps.insert(t.await.unwrap());
                }
                assert_eq!(scq.connections(), 1, "wave {wave}: only the long-lived connection is left");
            }
            println!("  {} connections came and went ({} distinct QP numbers) on one reaper", WAVES * PER, qps.len());
            exchange(lives.clone(), 0, 2000, cp.clone()).await;
            Arc::into_inner(lives).unwrap().disconnect().await.unwrap();
            drop(hub);
        });
        server.join().unwrap();
        // The hub and its connections gone, the CQ is the blocking calls' again.
        assert!(matches!(scq2.get_completion(), Ok(None)));
        let mut all = vec![0u8; (WAVES * PER + 1) * SLOT];
        region.read_at(0, &mut all).unwrap();
        for at in 1..=WAVES * PER {
            let want: Vec<u8> = (0..SLOT).map(|k| (at * 37 + k) as u8).collect();
            assert_eq!(&all[at * SLOT..(at + 1) * SLOT], &want[..], "the server's slot {at}");
        }
    }

    fn an_awaited_chain_commits_and_reports_a_failure_inside() {
        let (sp, cp) = (peer(), peer());
        let usage = Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY;
        let region = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), usage).unwrap();
        let port = next_port();
        let server = serve(&sp, port, 1, region.descriptor().to_vec());
        let forged = forged_rkey(&region.descriptor());
        run(async move {
            use rpma::ops::{AtomicWrite, Flush, Write};
            let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap();
            let log = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
            let src = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
            // librpma example 07's commit, ten times: the record, its
            // flush, the pointer to it, the pointer's flush (awaited).
            let quiet = Flags::COMPLETION_ON_ERROR;
            for k in 0..10u64 {
                src.write_at(0, &[k as u8 + 1; 64]).unwrap();
                let at = 64 + 64 * k;
                let mut chain = conn.chain();
                chain
                    .push(Write::new(&log, at, &src, 0, 64).flags(quiet))
                    .unwrap()
                    .push(Flush::new(&log, at, 64, FlushType::Visibility).flags(quiet))
                    .unwrap()
                    .push(AtomicWrite::new(&log, 0, at.to_le_bytes()).flags(quiet))
                    .unwrap();
                let last = Flush::new(&log, 0, 8, FlushType::Visibility).op_context(40 + k);
                let wc = conn.post_chain(&mut chain, last).await.unwrap();
                assert_eq!(wc.op_context, 40 + k, "the last operation's own op context comes back");
                assert!(chain.is_empty());
            }
            // A forged rkey in the middle: the awaited last operation fails
            // (flushed), and the failed write's completion arrives through
            // next_completion with its op context.
            let bad = MrRemote::from_descriptor(&forged).unwrap();
            let mut chain = conn.chain();
            chain.push(Write::new(&bad, 0, &src, 0, 8).flags(quiet).op_context(99)).unwrap();
            let e = conn.post_chain(&mut chain, Flush::new(&log, 0, 8, FlushType::Visibility)).await.unwrap_err();
            assert!(matches!(e.detail(), Some(Detail::Completed { .. })), "{e}");
            let wc = tokio::time::timeout(Duration::from_secs(10), conn.next_completion()).await.unwrap().unwrap();
            assert_eq!(wc.op_context, 99);
            assert!(!wc.status.is_success());
            println!("  a forged rkey inside an awaited chain: {e}; the failed write: {}", wc.status);
            drop(conn);
        });
        server.join().unwrap();
        let mut ptr = [0u8; 8];
        region.read_at(0, &mut ptr).unwrap();
        assert_eq!(u64::from_le_bytes(ptr), 64 + 64 * 9, "the last commit's pointer");
        for k in 0..10usize {
            let mut rec = [0u8; 64];
            region.read_at(64 + 64 * k, &mut rec).unwrap();
            assert_eq!(rec, [k as u8 + 1; 64], "record {k}");
        }
    }

    fn an_export_on_an_async_connection_is_used_and_ended_through_its_reaper() {
        // The server's side is an AsyncConn: it exports 512 bytes of a region
        // without remote access to this connection only, awaits the
        // descriptor's send; the client reads and writes through it; the
        // unexport's completion comes through next_completion, after which
        // the client is refused and the region deregisters.
        let (sp, cp) = (peer(), peer());
        let (c, s) = common::Pair::new().server_peer(&sp).client_peer(&cp).connect();
        let mr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::MW_BIND | Usage::WRITE_SRC).unwrap();
        mr.write_at(0, &[0x5a; 4096]).unwrap();
        let rbuf = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
        c.recv(&rbuf, 0, 64, 1).unwrap();
        // One runtime for the whole test: the AsyncConn's reaper lives in it.
        // The client's blocking calls inside it are fine: its own CQ needs
        // no reaper, and the server's side is awaited only for its send and
        // the unexport.
        run(async move {
            let a = AsyncConn::new(s).unwrap();
            let mut export = a.conn().export(&mr, 1024, 512, MwAccess::REMOTE_READ | MwAccess::REMOTE_WRITE).unwrap();
            let desc = export.descriptor().unwrap();
            let sbuf = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::SEND).unwrap();
            sbuf.write_at(0, &desc).unwrap();
            assert!(a.send(&sbuf, 0, desc.len()).await.unwrap().status.is_success());
            let wc = c.cq().next_completion(T).unwrap();
            assert!(wc.status.is_success(), "{wc:?}");
            let mut desc = vec![0u8; wc.byte_len as usize];
            rbuf.read_at(0, &mut desc).unwrap();
            let remote = MrRemote::from_descriptor(&desc).unwrap();
            assert_eq!(remote.size(), 512);
            let dst = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
            c.read(&dst, 0, &remote, 0, 64, Flags::COMPLETION_ALWAYS, 2).unwrap();
            assert!(c.cq().next_completion(T).unwrap().status.is_success());
            let mut got = [0u8; 64];
            dst.read_at(0, &mut got).unwrap();
            assert_eq!(got, [0x5a; 64]);
            let src = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
            src.write_at(0, &[0xa5; 64]).unwrap();
            c.write(&remote, 64, &src, 0, 64, Flags::COMPLETION_ALWAYS, 3).unwrap();
            assert!(c.cq().next_completion(T).unwrap().status.is_success());
            let mut landed = [0u8; 64];
            mr.read_at(1024 + 64, &mut landed).unwrap();
            assert_eq!(landed, [0xa5; 64], "the write landed at the window's offset 64");
            a.conn().unexport(&mut export, 77).unwrap();
            let wc = a.next_completion().await.unwrap();
            assert_eq!(wc.op_context, 77);
            assert!(wc.status.is_success(), "{wc:?}");
            assert!(!export.is_live());
            c.read(&dst, 0, &remote, 0, 64, Flags::COMPLETION_ALWAYS, 4).unwrap();
            let wc = c.cq().next_completion(T).unwrap();
            assert!(!wc.status.is_success(), "read through an ended export: {wc:?}");
            drop((export, a, c));
            drop(mr.dereg().expect("nothing holds the region"));
        });
    }

    /// An AsyncConn dropped live, with an export still bound on it,
    /// returns promptly in the task: the export's window ends with it.
    fn a_live_async_connection_with_an_export_drops_promptly() {
        let sp = peer();
        let (c, s) = common::Pair::new().server_peer(&sp).connect();
        let mr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::MW_BIND).unwrap();
        run(async move {
            let a = AsyncConn::new(s).unwrap();
            let export = a.conn().export(&mr, 0, 512, MwAccess::REMOTE_READ).unwrap();
            let t0 = std::time::Instant::now();
            drop((a, c));
            let took = t0.elapsed();
            println!("  a live AsyncConn with an export dropped in {took:?}");
            assert!(took < Duration::from_secs(5), "{took:?}");
            // The connection goes with its reaper, which ends at its next
            // turn on the runtime.
            let t0 = std::time::Instant::now();
            while export.is_live() {
                assert!(t0.elapsed() < Duration::from_secs(5), "the export outlived its connection");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            println!("  its export ended {:?} later", t0.elapsed());
            drop(export);
            drop(mr.dereg().expect("nothing holds the region"));
        });
    }

    fn a_task_whose_operations_complete_at_once_still_yields() {
        // rxe often completes a read before its post returns: the awaiting
        // future then takes its completion at once. Such a task must still
        // let the others run (tokio's cooperative budget, 128 units a
        // poll): a ticker beside it (which yields with `yield_now`, whose
        // wake tokio defers to its next reactor turn) sees its progress
        // move in steps of a few budgets (256 seen), not in one step of all
        // 2,000; every byte read is checked.
        const READS: usize = 2000;
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::READ_SRC).unwrap();
        region.write_at(0, &[0x3c; 64]).unwrap();
        let port = next_port();
        let server = serve(&sp, port, 1, region.descriptor().to_vec());
        run(async move {
            use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
            let conn = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap();
            let src = MrRemote::from_descriptor(conn.conn().private_data()).unwrap();
            let progress = Arc::new(AtomicUsize::new(0));
            let finished = Arc::new(AtomicBool::new(false));
            let (p, f) = (progress.clone(), finished.clone());
            let ticker = tokio::spawn(async move {
                let (mut last, mut widest) = (0, 0);
                while !f.load(Relaxed) {
                    let now = p.load(Relaxed);
                    widest = widest.max(now - last);
                    last = now;
                    tokio::task::yield_now().await;
                }
                widest
            });
            let reader = tokio::spawn(async move {
                let dst = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
                for k in 0..READS {
                    dst.write_at(0, &[0u8; 64]).unwrap();
                    conn.read(&dst, 0, &src, 0, 64).await.unwrap();
                    let mut got = [0u8; 64];
                    dst.read_at(0, &mut got).unwrap();
                    assert_eq!(got, [0x3c; 64], "read {k}");
                    progress.fetch_add(1, Relaxed);
                }
                finished.store(true, Relaxed);
                conn.disconnect().await.unwrap();
            });
            reader.await.unwrap();
            let widest = ticker.await.unwrap();
            println!("  the ticker saw at most {widest} reads between its turns");
            assert!(widest <= 4 * 128, "{widest} reads ran without a yield");
        });
        server.join().unwrap();
    }

    fn a_shared_channel_and_an_srq_are_served() {
        // The client's two CQs on one shared completion channel; two server
        // connections receiving through one SRQ without a receive CQ of its
        // own (its receives complete in each connection's CQ): one with its
        // own reaper, one attached to an AsyncSharedCq.
        use rpma::{CompletionOp, ConnCfg, SharedCq, Srq, SrqCfg};
        let sp = peer();
        let mut qcfg = SrqCfg::new();
        qcfg.set_rcq_size(0);
        let srq = Srq::new(&sp, Some(&qcfg)).unwrap();
        let inbox = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
        let (region, desc) = common::server_region(&sp, Usage::READ_SRC | Usage::WRITE_DST);
        let scq = SharedCq::new(&sp, 64).unwrap();
        let mut own_cfg = ConnCfg::new();
        own_cfg.set_srq(Some(&srq));
        let mut hub_cfg = own_cfg.clone();
        hub_cfg.set_shared_cq(Some(&scq));
        let mut cli_cfg = ConnCfg::new();
        cli_cfg.set_compl_channel(true);
        cli_cfg.set_rcq_size(4);
        let pair = common::Pair::new().server_peer(&sp).client_cfg(&cli_cfg).server_cfg(own_cfg);
        let (c, s) = pair.server_pdata(desc).connect();
        let (c2, s2) = common::Pair::new().server_peer(&sp).server_cfg(hub_cfg).connect();
        let cp = c.peer().clone();
        run(async move {
            let c = AsyncConn::new(c).unwrap();
            let s = Arc::new(AsyncConn::new(s).unwrap());
            let hub = rpma::aio::AsyncSharedCq::new(&scq).unwrap();
            let s2 = hub.attach(s2).unwrap();
            // The reaper takes the shared channel's events.
            assert!(matches!(c.conn().wait(), Err(rpma::Error::Inval(_))));
            assert!(matches!(c.conn().wait_timeout(Duration::from_secs(5)), Err(rpma::Error::Inval(_))));
            // Without a shared channel, that is what a wait says.
            assert!(matches!(s.conn().wait(), Err(rpma::Error::NotSharedChnl(_))));
            // The client's receive, posted and pending: only the server's
            // answer completes it, and the reaper, woken through the
            // shared channel, routes it.
            let answer = MrLocal::reg(&cp, AlignedBuf::new(8).unwrap(), Usage::RECV).unwrap();
            let mut recv = Box::pin(c.recv(&answer, 0, 8));
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(recv.as_mut(), cx).is_pending())
            });
            assert!(first.await, "nothing was sent yet");
            // The client's send CQ on the same channel: awaited write and
            // read of the server's region.
            let dst = MrRemote::from_descriptor(c.conn().private_data()).unwrap();
            let src = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC | Usage::SEND).unwrap();
            let back = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
            src.write_at(0, b"to the srq, one").unwrap();
            c.write(&dst, 128, &src, 0, 15).await.unwrap();
            c.read(&back, 0, &dst, 128, 15).await.unwrap();
            let mut got = [0u8; 15];
            back.read_at(0, &mut got).unwrap();
            assert_eq!(&got, b"to the srq, one");
            // Each server connection receives through the SRQ: the
            // completion comes in its own CQ, to next_completion.
            srq.recv(&inbox, 0, 15, 71).unwrap();
            c.send(&src, 0, 15).await.unwrap();
            let wc = s.next_completion().await.unwrap();
            assert_eq!((wc.op_context, wc.op, wc.byte_len), (71, CompletionOp::Recv, 15), "{wc:?}");
            let mut m = [0u8; 15];
            inbox.read_at(0, &mut m).unwrap();
            assert_eq!(&m, b"to the srq, one");
            srq.recv(&inbox, 32, 8, 72).unwrap();
            let src2 = MrLocal::reg(c2.peer(), AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
            src2.write_at(0, b"two, hub").unwrap();
            c2.send(&src2, 0, 8, Flags::COMPLETION_ALWAYS, 5).unwrap();
            assert_eq!(c2.cq().next_completion(T).unwrap().op_context, 5);
            let wc = s2.next_completion().await.unwrap();
            assert_eq!((wc.op_context, wc.op, wc.byte_len), (72, CompletionOp::Recv, 8), "{wc:?}");
            let mut m = [0u8; 8];
            inbox.read_at(32, &mut m).unwrap();
            assert_eq!(&m, b"two, hub");
            // The answer, awaited on the SRQ connection's send queue by
            // another task after a pause: the client's task sleeps in its
            // receive until the reaper, woken through the shared channel,
            // routes the completion.
            let out = MrLocal::reg(&sp, AlignedBuf::new(8).unwrap(), Usage::SEND).unwrap();
            out.write_at(0, b"answered").unwrap();
            let s1 = s.clone();
            let answering = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                s1.send(&out, 0, 8).await.unwrap();
            });
            let wc = recv.await.unwrap();
            answering.await.unwrap();
            assert_eq!((wc.op, wc.byte_len), (CompletionOp::Recv, 8));
            let mut a = [0u8; 8];
            answer.read_at(0, &mut a).unwrap();
            assert_eq!(&a, b"answered");
            let s = Arc::into_inner(s).unwrap();
            let (a, b) = tokio::join!(c.disconnect(), s.disconnect());
            a.unwrap();
            b.unwrap();
            c2.disconnect().unwrap();
            s2.disconnect().await.unwrap();
            drop(hub);
        });
        let mut b = [0u8; 15];
        region.read_at(128, &mut b).unwrap();
        assert_eq!(&b, b"to the srq, one");
    }

    /// A connection nobody accepts: the awaited connect says how it
    /// ended, typed, in each of the awaited APIs.
    fn a_refused_connection_is_a_typed_error() {
        let cp = peer();
        run(async move {
            let port = next_port();
            let refused = |e: rpma::Error| {
                matches!(
                    e.detail(),
                    Some(Detail::NotEstablished { event: ConnEvent::Rejected | ConnEvent::Unreachable })
                )
            };
            let e = rpma::aio::connect(&cp, &addr(), port, None, &[]).await.unwrap_err();
            assert!(refused(e), "aio::connect");
            let e = AsyncConn::connect(&cp, &addr(), port, None, &[]).await.unwrap_err();
            assert!(refused(e), "AsyncConn::connect");
        });
    }

    /// An awaited connect to an address nobody has (on the device's
    /// subnet: the CM retries its request for about 100 s) leaves the
    /// runtime's one thread running other tasks: no gap of half a second
    /// between the ticks of a 10 ms timer; it is dropped after 4 s.
    /// (Resolution runs on tokio's blocking pool; on rxe this address
    /// resolves at once, so the resolution's own wait is not what this
    /// exercises.)
    fn an_awaited_connect_never_blocks_the_runtime() {
        let cp = peer();
        run(async move {
            let gap = Arc::new(std::sync::Mutex::new(Duration::ZERO));
            let g = gap.clone();
            let ticker = tokio::spawn(async move {
                let mut last = std::time::Instant::now();
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let mut g = g.lock().unwrap();
                    *g = (*g).max(last.elapsed());
                    last = std::time::Instant::now();
                }
            });
            let mut cfg = rpma::ConnCfg::new();
            cfg.set_timeout(Duration::from_millis(1500)).unwrap();
            let t0 = std::time::Instant::now();
            let connect = rpma::aio::connect(&cp, "192.0.2.77", next_port(), Some(&cfg), &[]);
            let got = tokio::time::timeout(Duration::from_secs(4), connect).await;
            let took = t0.elapsed();
            ticker.abort();
            assert!(!matches!(got, Ok(Ok(_))), "nobody has 192.0.2.77");
            let gap = *gap.lock().unwrap();
            println!("  connect to nobody, given up after {took:?}: the longest wait between ticks {gap:?}");
            assert!(gap < Duration::from_millis(500), "the runtime was blocked for {gap:?}");
        });
    }

    fn outside_a_runtime_it_is_an_error_not_a_panic() {
        let (sp, cp) = (peer(), peer());
        let (c, s) = common::Pair::new().server_peer(&sp).client_peer(&cp).connect();
        let e = AsyncConn::new(c).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::NoRuntime), "{e}");
        drop(s);
    }
});
