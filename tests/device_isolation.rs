//! Device tests of per-connection exports (`Conn::export`): one client's
//! memory is out of reach of every other client of the same server, even
//! with its rkey; and, for contrast, the shared protection domain model of
//! librpma, where a guessed rkey reaches another client's region. Three
//! parties: the server, client A, client B (each a peer of its own).
//!
//! Guesses: every refused access puts the guessing connection in the error
//! state, so each guess runs on a connection of its own. The suite's run
//! tries A's own rkey and the 256 keys of the window's and of the region's
//! index; `RPMA_ISOLATION_GUESSES=N` adds the keys of neighbouring indices
//! up to N guesses in all (docs/testing.md: the long run).

mod common;
use common::{close, peer, Pair, T};
use rpma::{AlignedBuf, Conn, Flags, MrLocal, MrRemote, MwAccess, Peer, Usage, WcStatus};
use rpma_harness::device_tests;

/// librpma's descriptor `desc` with its rkey replaced by `rkey`.
fn with_rkey(desc: &[u8], rkey: u32) -> MrRemote {
    let mut d = desc.to_vec();
    d[16..20].copy_from_slice(&rkey.to_le_bytes());
    let r = MrRemote::from_descriptor(&d).unwrap();
    assert_eq!(r.rkey(), rkey, "the descriptor's rkey field");
    r
}

/// Writes 64 bytes of 0xee at offset 0 of `remote` from a fresh connection
/// of `bp` to `sp`'s server, and returns the write's completion status.
fn write_from_new_conn(sp: &Peer, bp: &Peer, remote: &MrRemote) -> WcStatus {
    let (c, s) = Pair::new().server_peer(sp).client_peer(bp).connect();
    let src = MrLocal::reg(bp, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
    src.write_at(0, &[0xee; 64]).unwrap();
    c.write(remote, 0, &src, 0, 64, Flags::COMPLETION_ALWAYS, 7).unwrap();
    let status = c.cq().next_completion(T).unwrap().status;
    if status.is_success() {
        close(c, s);
    } else {
        // The refused connection is in error: no orderly close.
        drop((c, s));
    }
    status
}

/// The descriptor, sent by the server on `s` and received by the client on
/// `c` (the export's bind runs before the send: the send queue is ordered).
fn deliver(s: &Conn, c: &Conn, desc: &[u8]) -> Vec<u8> {
    let rbuf = MrLocal::reg(c.peer(), AlignedBuf::new(64).unwrap(), Usage::RECV).unwrap();
    c.recv(&rbuf, 0, 64, 1).unwrap();
    let sbuf = MrLocal::reg(s.peer(), AlignedBuf::new(64).unwrap(), Usage::SEND).unwrap();
    sbuf.write_at(0, desc).unwrap();
    s.send(&sbuf, 0, desc.len(), Flags::COMPLETION_ALWAYS, 2).unwrap();
    assert!(s.cq().next_completion(T).unwrap().status.is_success());
    let wc = c.cq().next_completion(T).unwrap();
    assert!(wc.status.is_success(), "{wc:?}");
    let mut got = vec![0u8; wc.byte_len as usize];
    rbuf.read_at(0, &mut got).unwrap();
    got
}

device_tests!({
    fn an_export_offers_flush_and_remote_atomics_through_its_descriptor() {
        // A window granting read, write and atomics: its extended descriptor
        // carries the atomics (rpma's extension byte) and the visibility
        // flush (a read on the connection); the 21-byte one leaves atomics
        // out, so rpma refuses a fetch-and-add through it before posting.
        let sp = peer();
        let ap = peer();
        let mr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::MW_BIND | Usage::WRITE_SRC).unwrap();
        mr.write_at(0, &[0; 4096]).unwrap();
        assert!(!mr.is_pmem());
        let (ca, sa) = Pair::new().server_peer(&sp).client_peer(&ap).connect();
        let access = MwAccess::REMOTE_READ | MwAccess::REMOTE_WRITE | MwAccess::REMOTE_ATOMIC;
        let export = sa.export(&mr, 0, 4096, access).unwrap();
        let want = Usage::READ_SRC | Usage::WRITE_DST | Usage::REMOTE_ATOMIC | Usage::FLUSH_TYPE_VISIBILITY;
        assert_eq!(export.usage(), want);
        let plain = MrRemote::from_descriptor(&export.descriptor().unwrap()).unwrap();
        assert_eq!(plain.usage(), want - Usage::REMOTE_ATOMIC, "librpma's 21 bytes carry the first usage byte");
        let desc = deliver(&sa, &ca, &export.descriptor_ext().unwrap());
        assert_eq!(desc.len(), 23);
        let view = MrRemote::from_descriptor(&desc).unwrap();
        assert_eq!(view.usage(), want);
        assert!(view.is_window() && !plain.is_window(), "the extension marks a window: its flush is the read");

        let old = MrLocal::reg(&ap, AlignedBuf::new(8).unwrap(), Usage::READ_DST).unwrap();
        for (k, expect) in [(0u64, 0u64), (1, 5)] {
            ca.fetch_and_add(&old, 0, &view, 0, 5, Flags::COMPLETION_ALWAYS, 10 + k).unwrap();
            assert_eq!(ca.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
            let mut b = [0u8; 8];
            old.read_at(0, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), expect, "fetch-and-add {k} returned the previous value");
        }
        let e = ca.fetch_and_add(&old, 0, &plain, 0, 5, Flags::COMPLETION_ALWAYS, 12).unwrap_err();
        println!("  a fetch-and-add through the 21-byte descriptor: {e}");
        let src = MrLocal::reg(&ap, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        src.write_at(0, &[0xc3; 64]).unwrap();
        ca.write(&view, 64, &src, 0, 64, Flags::COMPLETION_ON_ERROR, 13).unwrap();
        ca.flush(&view, 64, 64, rpma::FlushType::Visibility, Flags::COMPLETION_ALWAYS, 14).unwrap();
        let wc = ca.cq().next_completion(T).unwrap();
        assert_eq!((wc.status, wc.op_context), (WcStatus::SUCCESS, 14));
        let mut now = [0u8; 128];
        mr.read_at(0, &mut now).unwrap();
        assert_eq!(u64::from_le_bytes(now[..8].try_into().unwrap()), 10, "two adds of 5");
        assert_eq!(now[64..], [0xc3; 64], "the flushed write landed");
        drop(export);
        close(ca, sa);
        drop(mr.dereg().expect("nothing holds the region"));
    }

    fn an_export_is_reached_by_its_connection_only() {
        let sp = peer();
        let (ap, bp) = (peer(), peer());
        let mr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::MW_BIND | Usage::WRITE_SRC).unwrap();
        mr.write_at(0, &[0x5a; 4096]).unwrap();
        let (ca, sa) = Pair::new().server_peer(&sp).client_peer(&ap).connect();
        let export = sa.export(&mr, 1024, 512, MwAccess::REMOTE_READ | MwAccess::REMOTE_WRITE).unwrap();
        let desc = deliver(&sa, &ca, &export.descriptor().unwrap());
        let a_view = MrRemote::from_descriptor(&desc).unwrap();

        // A reads its range and writes into it.
        let back = MrLocal::reg(&ap, AlignedBuf::new(512).unwrap(), Usage::READ_DST).unwrap();
        ca.read(&back, 0, &a_view, 0, 512, Flags::COMPLETION_ALWAYS, 3).unwrap();
        assert_eq!(ca.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        let mut got = [0u8; 512];
        back.read_at(0, &mut got).unwrap();
        assert_eq!(got, [0x5a; 512]);
        let src = MrLocal::reg(&ap, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        src.write_at(0, &[0xa1; 64]).unwrap();
        ca.write(&a_view, 0, &src, 0, 64, Flags::COMPLETION_ALWAYS, 4).unwrap();
        assert_eq!(ca.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        let mut want = vec![0x5a; 4096];
        want[1024..1088].fill(0xa1);
        let mut now = vec![0u8; 4096];
        mr.read_at(0, &mut now).unwrap();
        assert_eq!(now, want, "A's write landed in its range");

        // B, holding A's descriptor, tries A's rkey and its neighbours: the
        // 256 keys of the window's index and of the region's (the region's
        // own rkey among them), then neighbouring indices.
        let window = export.rkey();
        let region_addr = a_view.addr() - 1024;
        let mut guesses: Vec<(u64, u32)> = vec![(a_view.addr(), window)];
        guesses.extend((0..=255u32).map(|k| (a_view.addr(), (window & !0xff) | k)));
        guesses.extend((0..=255u32).map(|k| (region_addr, (mr.lkey() & !0xff) | k)));
        let n: usize = std::env::var("RPMA_ISOLATION_GUESSES").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut d = 1u32;
        while guesses.len() < n {
            for index in [(window >> 8).wrapping_add(d), (window >> 8).wrapping_sub(d)] {
                guesses.extend((0..=255u32).map(|k| (a_view.addr(), (index << 8) | k)));
            }
            d += 1;
        }
        guesses.truncate(n.max(513));
        let t0 = std::time::Instant::now();
        for (i, (addr, rkey)) in guesses.iter().enumerate() {
            let mut d = desc.clone();
            d[0..8].copy_from_slice(&addr.to_le_bytes());
            let status = write_from_new_conn(&sp, &bp, &with_rkey(&d, *rkey));
            assert!(!status.is_success(), "guess {i}: rkey {rkey:#x} at {addr:#x} reached A's memory from B");
        }
        mr.read_at(0, &mut now).unwrap();
        assert_eq!(now, want, "A's bytes unchanged after B's guesses");
        println!(
            "  export rkey {window:#x} (region lkey {:#x}): A reads and writes; B refused {} of {} guesses \
             (each on a new connection, {:.1} ms per guess); A's bytes unchanged",
            mr.lkey(),
            guesses.len(),
            guesses.len(),
            t0.elapsed().as_secs_f64() * 1e3 / guesses.len() as f64
        );

        // Beyond the window: A forges its descriptor's length (rpma's own
        // checks refuse the range otherwise) and writes just past the end.
        let mut long = desc.clone();
        long[8..16].copy_from_slice(&1024u64.to_le_bytes());
        let past = MrRemote::from_descriptor(&long).unwrap();
        ca.write(&past, 512, &src, 0, 64, Flags::COMPLETION_ALWAYS, 8).unwrap();
        let beyond = ca.cq().next_completion(T).unwrap().status;
        mr.read_at(0, &mut now).unwrap();
        let landed = now[1536..1600] == [0xa1; 64];
        println!("  A writing past its window's end: {beyond}; landed in the region: {landed}");
        if beyond.is_success() {
            // The device did not enforce the window's bounds (the docs say
            // so): the bytes past the window are A's write.
            assert!(landed);
            want[1536..1600].fill(0xa1);
        }
        assert_eq!(now, want, "nothing else changed");
        if !beyond.is_success() {
            // A's connection is in error now: a new one for the rest.
            return;
        }

        // Ended explicitly: A is refused too, and the region is free again.
        let mut export = export;
        sa.unexport(&mut export, 5).unwrap();
        assert!(sa.cq().next_completion(T).unwrap().status.is_success());
        assert!(!export.is_live());
        ca.read(&back, 0, &a_view, 0, 8, Flags::COMPLETION_ALWAYS, 6).unwrap();
        assert!(!ca.cq().next_completion(T).unwrap().status.is_success(), "A after the export ended");
        drop(export);
        mr.dereg().expect("no window holds the region");
        drop((ca, sa));
    }

    fn an_export_ends_with_its_connection() {
        // The export outlives its connection: the connection's drop
        // deallocates the window before its QP goes (quickly: rxe tears a QP
        // with a type 2 window still bound down in about 50 s), the region is
        // released, and the export reports that it ended.
        let sp = peer();
        let mr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), Usage::MW_BIND | Usage::WRITE_SRC).unwrap();
        let (ca, sa) = Pair::new().server_peer(&sp).connect();
        let mut export = sa.export(&mr, 0, 4096, MwAccess::REMOTE_READ).unwrap();
        let desc = deliver(&sa, &ca, &export.descriptor().unwrap());
        let remote = MrRemote::from_descriptor(&desc).unwrap();
        let back = MrLocal::reg(ca.peer(), AlignedBuf::new(64).unwrap(), Usage::READ_DST).unwrap();
        ca.read(&back, 0, &remote, 0, 64, Flags::COMPLETION_ALWAYS, 3).unwrap();
        assert_eq!(ca.cq().next_completion(T).unwrap().status, WcStatus::SUCCESS);
        assert!(export.is_live());
        let t0 = std::time::Instant::now();
        close(ca, sa);
        let took = t0.elapsed();
        assert!(took < std::time::Duration::from_secs(10), "the teardown took {took:?}");
        assert!(!export.is_live());
        assert!(export.descriptor().is_err());
        let (c2, s2) = Pair::new().server_peer(&sp).connect();
        let e = s2.unexport(&mut export, 9).unwrap_err();
        assert!(matches!(e, rpma::Error::Inval(_)), "{e}");
        close(c2, s2);
        mr.dereg().expect("the connection's end released the region");
        drop(export);
        println!("  the connection ended its export; teardown {took:?}; the region deregistered");
    }

    fn in_the_shared_pd_model_a_guessed_rkey_reaches_another_clients_region() {
        // librpma's model: the server registers a region with remote access
        // per client, in the peer's one protection domain. A's descriptor
        // works from B's connection; and B, knowing only its own rkey and
        // A's address, finds A's rkey by trying the keys of the neighbouring
        // index (rxe: rkey = pool index << 8 | 8 random bits).
        let sp = peer();
        let (ap, bp) = (peer(), peer());
        let usage = Usage::WRITE_DST | Usage::READ_SRC;
        let a_mr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), usage).unwrap();
        a_mr.write_at(0, &[0x5a; 4096]).unwrap();
        let b_mr = MrLocal::reg(&sp, AlignedBuf::new(4096).unwrap(), usage).unwrap();
        let (a_desc, b_desc) = (a_mr.descriptor().to_vec(), b_mr.descriptor().to_vec());
        let (ca, sa) = Pair::new().server_peer(&sp).client_peer(&ap).server_pdata(a_desc.clone()).connect();
        assert_eq!(&ca.private_data()[..a_desc.len()], &a_desc[..]);

        // With A's descriptor: reached at once.
        let status = write_from_new_conn(&sp, &bp, &MrRemote::from_descriptor(&a_desc).unwrap());
        assert_eq!(status, WcStatus::SUCCESS, "shared PD: A's descriptor from B's connection");
        let mut head = [0u8; 64];
        a_mr.read_at(0, &mut head).unwrap();
        assert_eq!(head, [0xee; 64], "B's write landed in A's region");

        // Guessing: B's own rkey names the neighbouring index.
        let own = MrRemote::from_descriptor(&b_desc).unwrap().rkey();
        let target = MrRemote::from_descriptor(&a_desc).unwrap().rkey();
        let mut tries = 0;
        let mut found = None;
        'search: for index in [(own >> 8).wrapping_sub(1), (own >> 8) + 1] {
            for k in 0..=255u32 {
                let guess = (index << 8) | k;
                if guess == own {
                    continue;
                }
                tries += 1;
                if write_from_new_conn(&sp, &bp, &with_rkey(&a_desc, guess)).is_success() {
                    found = Some(guess);
                    break 'search;
                }
            }
        }
        assert_eq!(found, Some(target), "B found A's rkey by guessing");
        println!(
            "  shared PD: A's descriptor works from B's connection; B's rkey {own:#x}, A's {target:#x}: found \
             in {tries} guesses"
        );
        close(ca, sa);
    }
});
