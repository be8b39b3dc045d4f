//! Device tests of `rpma::aio` (feature `tokio`): connections, events and
//! completions awaited on one current-thread tokio runtime, on a real RDMA
//! device (rxe in the harness VM).

mod common;
use common::peer;
use rpma::aio::{accept, connect, AsyncConnEvents, AsyncCq, AsyncEp};
use rpma::conn::ConnEvent;
use rpma::{AlignedBuf, ConnCfg, Ep, Flags, MrLocal, MrRemote, Usage};
use rpma_harness::{addr, device_tests, next_port};
use std::cell::Cell;
use std::os::fd::{AsFd, AsRawFd};
use std::rc::Rc;
use std::time::Duration;

/// One current-thread runtime: every task below runs on the test's thread.
fn run<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(120), f).await.expect("the test took over 120 s") })
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The kernel's count of live verbs objects on the devices (`rdma resource
/// show`: pd, cq, qp, cm_id, mr per device), or `None` without the tool.
fn verbs_objects() -> Option<String> {
    let out = std::process::Command::new("rdma").args(["resource", "show"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Polls `f` once and drops it: true if it was pending.
async fn pending_once<F: std::future::Future>(f: F) -> bool {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx).is_pending())).await
}

/// Serves `n` connections on `ep` (each gets `desc`), each until its client
/// closes, counting those it accepted in `accepted`; returns when all are
/// closed.
async fn serve(ep: Rc<Ep>, n: usize, desc: Vec<u8>, accepted: Rc<Cell<usize>>) {
    let aep = AsyncEp::new(&ep).unwrap();
    let mut closing = Vec::with_capacity(n);
    for _ in 0..n {
        let conn = accept(&aep, None, &desc).await.expect("accept");
        accepted.set(accepted.get() + 1);
        closing.push(tokio::task::spawn_local(async move {
            assert_eq!(AsyncConnEvents::new(&conn).unwrap().next_event().await.unwrap(), ConnEvent::Closed);
            conn.disconnect().unwrap();
        }));
    }
    for c in closing {
        c.await.unwrap();
    }
}

/// The client half of the close handshake.
async fn close(conn: rpma::Conn) {
    conn.disconnect().unwrap();
    assert_eq!(AsyncConnEvents::new(&conn).unwrap().next_event().await.unwrap(), ConnEvent::Closed);
}

device_tests!({
    fn fds_of_every_pollable_type_are_exposed() {
        let p = peer();
        let ep = Ep::listen(&p, &addr(), next_port()).unwrap();
        assert_eq!(ep.as_fd().as_raw_fd(), ep.fd());
        assert_eq!(ep.as_raw_fd(), ep.fd());
        let scq = rpma::SharedCq::new(&p, 16).unwrap();
        assert_eq!(scq.as_raw_fd(), scq.cq().fd());
        assert!(p.context().as_raw_fd() >= 0, "the device's async-event fd");
    }

    fn sixty_four_connections_on_one_thread_every_byte_verified() {
        const N: usize = 64;
        const ROUNDS: usize = 20;
        const SLOT: usize = 256;
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(N * SLOT).unwrap(), Usage::WRITE_DST | Usage::READ_SRC).unwrap();
        let port = next_port();
        let ep = Rc::new(Ep::listen(&sp, &addr(), port).unwrap());
        let desc = region.descriptor().to_vec();
        let thread = std::thread::current().id();
        let accepted = Rc::new(Cell::new(0));
        run(tokio::task::LocalSet::new().run_until(async move {
            let server = tokio::task::spawn_local(serve(ep, N, desc, accepted.clone()));
            let clients: Vec<_> = (0..N)
                .map(|i| {
                    let (cp, accepted, serving) = (cp.clone(), accepted.clone(), server.abort_handle());
                    tokio::task::spawn_local(async move {
                        assert_eq!(std::thread::current().id(), thread);
                        let conn = connect(&cp, &addr(), port, None, &[]).await.expect("connect");
                        let dst = MrRemote::from_descriptor(conn.private_data()).unwrap();
                        let src = MrLocal::reg(&cp, AlignedBuf::new(SLOT).unwrap(), Usage::WRITE_SRC).unwrap();
                        let back = MrLocal::reg(&cp, AlignedBuf::new(SLOT).unwrap(), Usage::READ_DST).unwrap();
                        let cq = AsyncCq::new(conn.cq()).unwrap();
                        let at = (i * SLOT) as u64;
                        for r in 0..ROUNDS {
                            let bytes: Vec<u8> = (0..SLOT).map(|k| (i * 31 + r * 7 + k) as u8).collect();
                            src.write_at(0, &bytes).unwrap();
                            conn.write(&dst, at, &src, 0, SLOT, Flags::COMPLETION_ON_ERROR, 0).unwrap();
                            conn.read(&back, 0, &dst, at, SLOT, Flags::COMPLETION_ALWAYS, r as u64).unwrap();
                            let wc = cq.next_completion().await.unwrap();
                            assert!(wc.status.is_success() && wc.op_context == r as u64, "{wc:?}");
                            let mut got = vec![0u8; SLOT];
                            back.read_at(0, &mut got).unwrap();
                            assert_eq!(got, bytes, "connection {i} round {r}");
                        }
                        drop(cq);
                        // A client closes only once the server has seen
                        // every connection established: with 64 connects at
                        // once a handshake's last message (RTU) can be lost,
                        // and the server sees the connection established
                        // only when its retried reply brings the RTU again;
                        // a client that closed first would make it `Closed`.
                        // (A server that stopped sees nothing more.)
                        while accepted.get() < N && !serving.is_finished() {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        close(conn).await;
                    })
                })
                .collect();
            for c in clients {
                c.await.unwrap();
            }
            server.await.unwrap();
        }));
        let mut all = vec![0u8; N * SLOT];
        region.read_at(0, &mut all).unwrap();
        for i in 0..N {
            let want: Vec<u8> = (0..SLOT).map(|k| (i * 31 + (ROUNDS - 1) * 7 + k) as u8).collect();
            assert_eq!(&all[i * SLOT..(i + 1) * SLOT], &want[..], "the server's slot {i}");
        }
    }

    fn a_future_dropped_mid_wait_loses_no_completion() {
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::READ_SRC).unwrap();
        region.write_at(0, b"dropped futures lose nothing").unwrap();
        let port = next_port();
        let ep = Rc::new(Ep::listen(&sp, &addr(), port).unwrap());
        let desc = region.descriptor().to_vec();
        run(tokio::task::LocalSet::new().run_until(async move {
            let server = tokio::task::spawn_local(serve(ep, 1, desc, Rc::default()));
            let conn = connect(&cp, &addr(), port, None, &[]).await.unwrap();
            let src = MrRemote::from_descriptor(conn.private_data()).unwrap();
            let dst = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
            let cq = AsyncCq::new(conn.cq()).unwrap();
            // 1: a wait with nothing posted, polled once (pending) and dropped
            assert!(pending_once(cq.next_completion()).await, "a completion with nothing posted");
            conn.read(&dst, 0, &src, 0, 28, Flags::COMPLETION_ALWAYS, 1).unwrap();
            assert_eq!(cq.next_completion().await.unwrap().op_context, 1);
            // 2: the completion (and its event) arrive while no future
            // exists; one is created and dropped before it is polled
            conn.read(&dst, 0, &src, 0, 28, Flags::COMPLETION_ALWAYS, 2).unwrap();
            // the CQ's channel becomes readable when the event is there
            let ready = rpma::utils::poll_fds(&[conn.cq().as_fd()], Some(Duration::from_secs(30))).unwrap();
            assert!(ready[0], "no completion event within 30 s");
            drop(cq.next_completion());
            assert_eq!(cq.next_completion().await.unwrap().op_context, 2);
            // 3: a wait dropped after the operation was posted, while its
            // completion may be arriving
            conn.read(&dst, 0, &src, 0, 28, Flags::COMPLETION_ALWAYS, 3).unwrap();
            let wc = match tokio::time::timeout(Duration::from_micros(1), cq.next_completion()).await {
                Ok(found) => found.unwrap(), // it got there before the timer
                Err(_) => cq.next_completion().await.unwrap(),
            };
            assert_eq!(wc.op_context, 3);
            // 4: two completions taken as a batch
            conn.read(&dst, 0, &src, 0, 28, Flags::COMPLETION_ALWAYS, 4).unwrap();
            conn.read(&dst, 0, &src, 0, 28, Flags::COMPLETION_ALWAYS, 5).unwrap();
            let mut wc = [rpma::Cq::EMPTY; 4];
            let mut seen = Vec::new();
            while seen.len() < 2 {
                let n = cq.get_wc(&mut wc).await.unwrap();
                assert!(n >= 1, "an awaited get_wc returns at least one");
                seen.extend(wc[..n].iter().map(|w| w.op_context));
            }
            assert_eq!(seen, [4, 5]);
            let mut got = [0u8; 28];
            dst.read_at(0, &mut got).unwrap();
            assert_eq!(&got, b"dropped futures lose nothing");
            drop(cq);
            close(conn).await;
            server.await.unwrap();
        }));
    }

    fn a_thousand_async_connect_disconnect_cycles_leak_nothing() {
        let cycles: usize = std::env::var("RPMA_ASYNC_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
        let (sp, cp) = (peer(), peer());
        let port = next_port();
        let ep = Rc::new(Ep::listen(&sp, &addr(), port).unwrap());
        let mut cfg = ConnCfg::new();
        cfg.set_timeout(Duration::from_millis(5000)).unwrap();
        // one cycle first: libraries open their own fds on first use
        let fds = run(tokio::task::LocalSet::new().run_until(async {
            let mut baseline = (0, None);
            let server = tokio::task::spawn_local(serve(ep.clone(), cycles + 1, vec![], Rc::default()));
            for k in 0..=cycles {
                let conn = connect(&cp, &addr(), port, Some(&cfg), &[]).await.expect("connect");
                close(conn).await;
                if k == 0 {
                    baseline = (open_fds(), verbs_objects());
                }
            }
            server.await.unwrap();
            (baseline, (open_fds(), verbs_objects()))
        }));
        let ((fd0, v0), (fd1, v1)) = fds;
        println!("  {cycles} cycles: open fds {fd0} after the first, {fd1} after the last");
        println!("  verbs objects after the first: {v0:?}\n  after the last: {v1:?}");
        assert_eq!(fd0, fd1, "file descriptors leaked");
        assert!(v0.is_some(), "`rdma resource show` (iproute2) is needed to count verbs objects");
        assert_eq!(v0, v1, "verbs objects leaked");
    }

    fn a_shared_completion_channel_is_awaited() {
        let (sp, cp) = (peer(), peer());
        let region = MrLocal::reg(&sp, AlignedBuf::new(64).unwrap(), Usage::READ_SRC).unwrap();
        region.write_at(0, b"shared channel").unwrap();
        let port = next_port();
        let ep = Rc::new(Ep::listen(&sp, &addr(), port).unwrap());
        let desc = region.descriptor().to_vec();
        run(tokio::task::LocalSet::new().run_until(async move {
            let server = tokio::task::spawn_local(serve(ep, 1, desc, Rc::default()));
            let mut cfg = ConnCfg::new();
            cfg.set_compl_channel(true);
            cfg.set_rcq_size(4);
            let conn = connect(&cp, &addr(), port, Some(&cfg), &[]).await.unwrap();
            // a CQ on the shared channel cannot be awaited on its own
            assert!(matches!(AsyncCq::new(conn.cq()), Err(rpma::Error::SharedChannel(_))));
            let src = MrRemote::from_descriptor(conn.private_data()).unwrap();
            let dst = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
            let ch = rpma::aio::AsyncChannel::new(&conn).unwrap();
            assert!(pending_once(ch.wait()).await, "an event with nothing posted");
            conn.read(&dst, 0, &src, 0, 14, Flags::COMPLETION_ALWAYS, 9).unwrap();
            let (cq, is_rcq) = ch.wait().await.unwrap();
            assert!(!is_rcq);
            let wc = loop {
                match cq.get_completion().unwrap() {
                    Some(wc) => break wc,
                    None => tokio::task::yield_now().await,
                }
            };
            assert_eq!(wc.op_context, 9);
            let mut got = [0u8; 14];
            dst.read_at(0, &mut got).unwrap();
            assert_eq!(&got, b"shared channel");
            drop(ch);
            close(conn).await;
            server.await.unwrap();
        }));
    }

    fn outside_a_runtime_it_is_an_error_not_a_panic() {
        let p = peer();
        let ep = Ep::listen(&p, &addr(), next_port()).unwrap();
        let e = AsyncEp::new(&ep).expect_err("no runtime");
        // The text is what is tested: a call outside a runtime is a bug in
        // the caller, and the message says what to do (no typed detail).
        assert_eq!(e.detail(), Some(&rpma::error::Detail::NoRuntime), "{e}");
    }
});
