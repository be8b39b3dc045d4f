//! Resource hygiene, concurrency and a killed peer, on a real RDMA device.

mod common;
use common::{close, peer, Pair, T};
use rpma::{AlignedBuf, CommonData, ConnCfg, ConnEvent, Flags, MrLocal, MrRemote, Usage, WcStatus};
use rpma_harness::{addr, device_tests, next_port};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Open file descriptors of this process.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Resident set size in KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 4
}

/// The device's verbs object counts (`rdma resource show`): pd, cq, qp,
/// cm_id, mr, ctx, srq.
fn verbs_objects() -> String {
    let out = Command::new("rdma").args(["resource", "show"]).output().expect("rdma (iproute2)");
    String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_string()
}

device_tests!({
    fn register_deregister_10000_cycles() {
        let p = peer();
        let warm = MrLocal::reg(&p, AlignedBuf::new(4096).unwrap(), Usage::READ_SRC).unwrap();
        drop(warm);
        let (f0, r0, v0) = (fds(), rss_kib(), verbs_objects());
        let t0 = Instant::now();
        for i in 0..10_000 {
            let mr = MrLocal::reg(&p, AlignedBuf::new(4096).unwrap(), Usage::READ_SRC | Usage::WRITE_DST).unwrap();
            if i % 2 == 0 {
                mr.dereg().unwrap();
            } // else dropped
        }
        let (f1, r1, v1) = (fds(), rss_kib(), verbs_objects());
        println!("  10000 cycles in {:?}; fds {f0} -> {f1}; RSS {r0} -> {r1} KiB; {v0} -> {v1}", t0.elapsed());
        assert_eq!(f1, f0, "file descriptors");
        assert_eq!(v1, v0, "verbs objects");
        assert!(r1 <= r0 + 4096, "RSS grew by {} KiB", r1 - r0);
    }

    fn connect_disconnect_1000_cycles() {
        let sp = peer();
        let warm = Pair::new().server_peer(&sp).connect();
        close(warm.0, warm.1);
        let (f0, r0, v0) = (fds(), rss_kib(), verbs_objects());
        let t0 = Instant::now();
        // Four ports, each reused 250 times.
        let ports = [next_port(), next_port(), next_port(), next_port()];
        for i in 0..1000 {
            let (c, s) = Pair::new().server_peer(&sp).port(ports[i % 4]).connect();
            close(c, s);
        }
        let (f1, r1, v1) = (fds(), rss_kib(), verbs_objects());
        println!("  1000 cycles in {:?}; fds {f0} -> {f1}; RSS {r0} -> {r1} KiB; {v0} -> {v1}", t0.elapsed());
        assert_eq!(f1, f0, "file descriptors");
        assert_eq!(v1, v0, "verbs objects");
        assert!(r1 <= r0 + 8192, "RSS grew by {} KiB", r1 - r0);
    }

    /// N threads, each with its own connection to one server region, each
    /// writing M records into its own slice and reading them back.
    fn threads_with_their_own_connections() {
        const N: usize = 4;
        const M: usize = 50;
        let sp = peer();
        let target = Arc::new(
            MrLocal::reg(&sp, AlignedBuf::new(N * M * 64).unwrap(), Usage::READ_SRC | Usage::WRITE_DST).unwrap(),
        );
        let desc = target.descriptor().to_vec();
        let mut handles = Vec::new();
        for t in 0..N {
            let (sp, desc) = (sp.clone(), desc.clone());
            handles.push(thread::spawn(move || {
                let (c, s) = Pair::new().server_peer(&sp).connect();
                let remote = MrRemote::from_descriptor(&desc).unwrap();
                let local =
                    MrLocal::reg(c.peer(), AlignedBuf::new(128).unwrap(), Usage::WRITE_SRC | Usage::READ_DST).unwrap();
                for m in 0..M {
                    let rec = [(t * M + m) as u8; 64];
                    local.write_at(0, &rec).unwrap();
                    let off = ((t * M + m) * 64) as u64;
                    c.write(&remote, off, &local, 0, 64, Flags::COMPLETION_ALWAYS, 1).unwrap();
                    assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
                    c.read(&local, 64, &remote, off, 64, Flags::COMPLETION_ALWAYS, 2).unwrap();
                    assert_eq!(c.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
                    let mut back = [0u8; 64];
                    local.read_at(64, &mut back).unwrap();
                    assert_eq!(back, rec, "thread {t} record {m}");
                }
                close(c, s);
            }));
        }
        for h in handles {
            h.join().expect("a thread failed");
        }
        for i in 0..N * M {
            let mut b = [0u8; 64];
            target.read_at(i * 64, &mut b).unwrap();
            assert_eq!(b, [i as u8; 64], "record {i} at the server");
        }
    }

    /// Several threads share one connection's data path; one reaper routes
    /// completions back by op_context.
    fn threads_sharing_one_connection() {
        const N: usize = 4;
        const M: usize = 40;
        let sp = peer();
        let target =
            MrLocal::reg(&sp, AlignedBuf::new(N * M * 32).unwrap(), Usage::WRITE_DST | Usage::READ_SRC).unwrap();
        let mut cfg = rpma::ConnCfg::new();
        cfg.set_sq_size(64);
        cfg.set_cq_size(64);
        let (c, s) = Pair::new()
            .server_peer(&sp)
            .client_cfg(&cfg)
            .server_pdata(CommonData::encode(0, &target, None).to_vec())
            .connect();
        let c = Arc::new(c);
        let remote = CommonData::decode(c.private_data()).unwrap().mr;
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..N).map(|_| std::sync::mpsc::channel::<WcStatus>()).unzip();
        let reaper = {
            let c = c.clone();
            thread::spawn(move || {
                for _ in 0..N * M {
                    let wc = c.cq().next_completion(T).expect("completion");
                    txs[wc.op_context as usize].send(wc.status).unwrap();
                }
            })
        };
        let mut workers = Vec::new();
        for (t, rx) in rxs.into_iter().enumerate() {
            let (c, remote) = (c.clone(), remote);
            workers.push(thread::spawn(move || {
                let local = MrLocal::reg(c.peer(), AlignedBuf::new(32).unwrap(), Usage::WRITE_SRC).unwrap();
                for m in 0..M {
                    local.write_at(0, &[(t * M + m) as u8; 32]).unwrap();
                    c.write(&remote, ((t * M + m) * 32) as u64, &local, 0, 32, Flags::COMPLETION_ALWAYS, t as u64)
                        .unwrap();
                    assert_eq!(rx.recv_timeout(T).unwrap(), WcStatus::SUCCESS);
                }
            }));
        }
        for w in workers {
            w.join().expect("a worker failed");
        }
        reaper.join().unwrap();
        for i in 0..N * M {
            let mut b = [0u8; 32];
            target.read_at(i * 32, &mut b).unwrap();
            assert_eq!(b, [i as u8; 32], "record {i}");
        }
        let c = Arc::try_unwrap(c).unwrap();
        close(c, s);
    }

    /// N connections, each with its CQs on one completion channel
    /// (`set_compl_channel`), driven from a single thread by one epoll loop over
    /// their `compl_fd`s: each connection writes M records and reads each back,
    /// every byte verified on both sides.
    fn connections_on_shared_channels_one_epoll_loop() {
        const N: usize = 6;
        const M: usize = 30;
        let rec = |i: usize, m: usize| [(i * M + m) as u8 ^ 0x5a; 64];
        let sp = peer();
        let target =
            MrLocal::reg(&sp, AlignedBuf::new(N * M * 64).unwrap(), Usage::READ_SRC | Usage::WRITE_DST).unwrap();
        let remote = MrRemote::from_descriptor(&target.descriptor()).unwrap();
        let mut cfg = ConnCfg::new();
        cfg.set_compl_channel(true);
        cfg.set_rcq_size(4);
        let pairs: Vec<_> = (0..N).map(|_| Pair::new().server_peer(&sp).client_cfg(&cfg).connect()).collect();
        // SAFETY: plain syscalls on fds this test owns; the events array outlives
        // every epoll_wait call.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(epfd >= 0, "epoll_create1: {}", std::io::Error::last_os_error());
        for (i, (c, _)) in pairs.iter().enumerate() {
            let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
            let rc = unsafe {
                libc::epoll_ctl(
                    epfd,
                    libc::EPOLL_CTL_ADD,
                    std::os::fd::AsRawFd::as_raw_fd(&c.compl_fd().unwrap()),
                    &mut ev,
                )
            };
            assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
        }
        // Per connection: records done, and whether the read-back is in flight.
        let local: Vec<_> = pairs
            .iter()
            .map(|(c, _)| {
                MrLocal::reg(c.peer(), AlignedBuf::new(128).unwrap(), Usage::WRITE_SRC | Usage::READ_DST).unwrap()
            })
            .collect();
        let mut state = vec![(0usize, false); N];
        for (i, (c, _)) in pairs.iter().enumerate() {
            local[i].write_at(0, &rec(i, 0)).unwrap();
            c.write(&remote, (i * M * 64) as u64, &local[i], 0, 64, Flags::COMPLETION_ALWAYS, 1).unwrap();
        }
        let (mut finished, mut wakeups) = (0, 0);
        let t0 = Instant::now();
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        while finished < N {
            assert!(t0.elapsed() < Duration::from_secs(60), "stuck: {state:?}");
            let n = unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), events.len() as i32, 10_000) };
            assert!(n > 0, "epoll_wait gave {n} with {state:?}: {}", std::io::Error::last_os_error());
            for ev in &events[..n as usize] {
                wakeups += 1;
                let i = ev.u64 as usize;
                let c = &pairs[i].0;
                let (cq, is_rcq) = c.wait().unwrap();
                assert!(!is_rcq, "no receives were posted");
                // Drain what is there (the CQ was re-armed by `wait`), then post
                // the next operation: its completion needs a new wake-up.
                let mut got = 0;
                while let Ok(Some(wc)) = cq.get_completion() {
                    assert_eq!(wc.status, WcStatus::SUCCESS, "connection {i}");
                    got += 1;
                }
                assert!(got <= 1, "connection {i}: {got} completions for one operation in flight");
                let (m, reading) = &mut state[i];
                if got == 0 {
                    continue; // a wake-up for a completion already reaped
                }
                let off = ((i * M + *m) * 64) as u64;
                if !*reading {
                    c.read(&local[i], 64, &remote, off, 64, Flags::COMPLETION_ALWAYS, 2).unwrap();
                    *reading = true;
                    continue;
                }
                let mut back = [0u8; 64];
                local[i].read_at(64, &mut back).unwrap();
                assert_eq!(back, rec(i, *m), "connection {i} record {m}");
                *m += 1;
                *reading = false;
                if *m == M {
                    finished += 1;
                } else {
                    local[i].write_at(0, &rec(i, *m)).unwrap();
                    c.write(&remote, off + 64, &local[i], 0, 64, Flags::COMPLETION_ALWAYS, 1).unwrap();
                }
            }
        }
        unsafe { libc::close(epfd) };
        println!("  {N} connections x {M} records, {wakeups} epoll wake-ups, {:.1?}", t0.elapsed());
        drop(local);
        for (c, s) in pairs {
            close(c, s);
        }
        for i in 0..N {
            for m in 0..M {
                let mut b = [0u8; 64];
                target.read_at((i * M + m) * 64, &mut b).unwrap();
                assert_eq!(b, rec(i, m), "connection {i} record {m} at the server");
            }
        }
    }

    /// The peer process dies (SIGKILL) in the middle of a stream of writes: the
    /// survivor sees errors or a closing event within a bound, posting stops,
    /// nothing hangs, and a new connection to a restarted peer works.
    fn peer_killed_mid_stream() {
        let exe = std::env::current_exe().unwrap();
        let server = exe.parent().and_then(|d| d.parent()).unwrap().join("examples").join("interop-peer");
        let port = next_port();
        let p = port.to_string();
        let mut child = Command::new(&server).args(["server", &addr(), &p]).stdout(Stdio::null()).spawn().unwrap();
        let cp = peer();
        let conn = loop {
            let c = rpma::ConnReq::new(&cp, &addr(), port, None).unwrap().connect(&[]).unwrap();
            match c.next_event_timeout(T).unwrap() {
                ConnEvent::Established => break c,
                _ => thread::sleep(Duration::from_millis(100)),
            }
        };
        let remote = CommonData::decode(conn.private_data()).unwrap().mr;
        let local =
            MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC | Usage::READ_DST | Usage::SEND).unwrap();
        // Stream writes, reads and sends; after 20 rounds the server is
        // SIGKILLed and one more of each is posted. The survivor waits on its CQ
        // *and* its event fd.
        for i in 0..20 {
            conn.write(&remote, 1024, &local, 0, 16, Flags::COMPLETION_ALWAYS, i).unwrap();
            assert!(conn.cq().next_completion(T).unwrap().status.is_success());
            conn.read(&local, 32, &remote, 1024, 16, Flags::COMPLETION_ALWAYS, i).unwrap();
            assert!(conn.cq().next_completion(T).unwrap().status.is_success());
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let t0 = Instant::now();
        conn.write(&remote, 1024, &local, 0, 16, Flags::COMPLETION_ALWAYS, 99).unwrap();
        conn.read(&local, 32, &remote, 1024, 16, Flags::COMPLETION_ALWAYS, 98).unwrap();
        conn.send(&local, 0, 16, Flags::COMPLETION_ALWAYS, 97).unwrap();
        let mut event = None;
        let mut outstanding = std::collections::BTreeMap::new();
        while t0.elapsed() < Duration::from_secs(60) && (event.is_none() || outstanding.len() < 3) {
            let fds = [std::os::fd::AsFd::as_fd(&conn), std::os::fd::AsFd::as_fd(conn.cq())];
            let ready = rpma::utils::poll_fds(&fds, Some(Duration::from_secs(5))).unwrap();
            if ready[0] && event.is_none() {
                let ev = conn.next_event().unwrap();
                println!("  event {ev} after {:?}", t0.elapsed());
                assert!(matches!(ev, ConnEvent::Closed | ConnEvent::Lost), "{ev:?}");
                event = Some(ev);
                // The local QP goes to the error state: outstanding operations
                // come back flushed.
                conn.disconnect().unwrap();
            }
            if ready[1] {
                let _ = conn.cq().wait();
            }
            while let Ok(Some(wc)) = conn.cq().get_completion() {
                println!("  completion of {:?} {} after {:?}: {}", wc.op, wc.op_context, t0.elapsed(), wc.status);
                if wc.op_context >= 97 {
                    outstanding.insert(wc.op_context, wc.status);
                }
            }
        }
        let took = t0.elapsed();
        assert!(event.is_some(), "no closing event within {took:?}");
        assert_eq!(outstanding.len(), 3, "the outstanding write, read and send were not all reported ({took:?})");
        assert!(took < Duration::from_secs(60), "took {took:?}");
        let e = conn.write(&remote, 1024, &local, 0, 16, Flags::COMPLETION_ALWAYS, 100).unwrap_err();
        assert_eq!(e.code(), rpma::error::RPMA_E_INVAL, "posting after the peer died: {e}");
        drop(local);
        let t1 = Instant::now();
        drop(conn);
        println!("  dropping the connection took {:?}", t1.elapsed());
        // A restarted peer is reachable again.
        let mut child = Command::new(&server).args(["server", &addr(), &p]).stdout(Stdio::null()).spawn().unwrap();
        let c2 = loop {
            let c = rpma::ConnReq::new(&cp, &addr(), port, None).unwrap().connect(&[]).unwrap();
            match c.next_event_timeout(T).unwrap() {
                ConnEvent::Established => break c,
                _ => thread::sleep(Duration::from_millis(100)),
            }
        };
        let remote = CommonData::decode(c2.private_data()).unwrap().mr;
        let local = MrLocal::reg(&cp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        c2.write(&remote, 1024, &local, 0, 16, Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert_eq!(c2.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        c2.disconnect().unwrap();
        assert_eq!(c2.next_event_timeout(T).unwrap(), ConnEvent::Closed);
        assert!(child.wait().unwrap().success());
    }
});
