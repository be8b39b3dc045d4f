//! Device tests of peers, memory registration and descriptors, on a real RDMA
//! device (Soft-RoCE in the harness VM when the host has none).

mod common;
use rpma::device::ContextType;
use rpma::error::{Arg, Detail};
use rpma::error::{RPMA_E_INVAL, RPMA_E_NOSUPP, RPMA_E_PROVIDER};
use rpma::{Access, Advice, AdviseFlags, AlignedBuf, Flags, HugeBuf, HugePage, MrLocal, MrRemote, Peer, Usage};
use rpma_harness::{addr, device_tests, in_vm};
use std::time::Duration;

fn peer() -> Peer {
    let ctx = rpma::device::get_ibv_context(&addr(), ContextType::Local).expect("device context for RPMA_TEST_ADDR");
    Peer::new(&ctx).expect("peer")
}

/// librpma's usage → access table, for the peer's transport and flush mode.
fn expected_access(peer: &Peer, u: Usage) -> Access {
    let c = peer.capabilities();
    let (lw, rw, rr) = (Access::LOCAL_WRITE, Access::REMOTE_WRITE, Access::REMOTE_READ);
    let mut a = Access::empty();
    for flag in u.iter() {
        a |= match flag {
            Usage::READ_SRC => rr,
            Usage::READ_DST if c.iwarp => lw | rw,
            Usage::READ_DST => lw,
            Usage::WRITE_SRC => lw,
            Usage::WRITE_DST => lw | rw,
            Usage::FLUSH_TYPE_VISIBILITY if c.native_flush => Access::FLUSH_GLOBAL,
            Usage::FLUSH_TYPE_PERSISTENT if c.native_flush => Access::FLUSH_PERSISTENT,
            Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT => rr,
            Usage::SEND => Access::empty(),
            Usage::RECV => lw,
            Usage::MW_BIND => Access::MW_BIND,
            Usage::REMOTE_ATOMIC => Access::REMOTE_ATOMIC | lw,
            _ => unreachable!(),
        };
    }
    a
}

/// With native RDMA FLUSH, rxe grants `IBV_ACCESS_FLUSH_PERSISTENT` only on
/// persistent memory (measured on 6.12: `EINVAL` for DRAM); rpma reports
/// that with an error saying so. Returns whether `u` was such a case (and
/// checks the refusal).
/// The 2 MiB pool's size set to `n` pages for a test in the harness VM,
/// and set back to what it was when dropped (also when the test fails).
struct Reserved(String);

const POOL_2M: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages";

impl Reserved {
    fn set(n: u32) -> Reserved {
        assert!(in_vm(), "the pool of a host is its own: only the harness VM's is changed");
        let before = std::fs::read_to_string(POOL_2M).expect("the 2 MiB pool");
        std::fs::write(POOL_2M, n.to_string()).expect("reserving huge pages");
        Reserved(before)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        let _ = std::fs::write(POOL_2M, self.0.trim());
    }
}

fn refused_on_dram<M: rpma::RegMemory>(p: &Peer, u: Usage, dram: M) -> bool {
    if !(p.is_native_flush_supported() && u.contains(Usage::FLUSH_TYPE_PERSISTENT) && in_vm()) {
        return false;
    }
    let e = MrLocal::reg(p, dram, u).expect_err("rxe refuses persistent flush access on DRAM");
    assert_eq!((e.code(), e.errno()), (RPMA_E_PROVIDER, Some(libc::EINVAL)), "{e}");
    assert_eq!(e.detail(), Some(&Detail::NeedsPmem), "the provider's bare EINVAL gets its reason: {e}");
    println!("  {u:?} on DRAM: refused, as rxe does with native flush");
    true
}

device_tests!({
    fn context_local_is_the_test_device() {
        let ctx = rpma::device::get_ibv_context(&addr(), ContextType::Local).unwrap();
        if let Ok(dev) = std::env::var("RPMA_TEST_DEVICE") {
            assert_eq!(ctx.device_name(), dev);
        }
    }

    fn context_remote_resolves_to_the_test_device() {
        let local = rpma::device::get_ibv_context(&addr(), ContextType::Local).unwrap();
        let remote = rpma::device::get_ibv_context(&addr(), ContextType::Remote).unwrap();
        assert_eq!(local.device_name(), remote.device_name());
    }

    fn context_for_address_without_device_is_provider_error() {
        // 192.0.2.200 is in the test subnet but assigned to no interface.
        let e = rpma::device::get_ibv_context("192.0.2.200", ContextType::Local).unwrap_err();
        assert_eq!(e.code(), RPMA_E_PROVIDER, "{e}");
        assert!(e.errno().is_some(), "the errno is kept: {e:?}");
        let want = Detail::NoDevice { addr: Some("192.0.2.200".into()), loopback: false };
        assert_eq!(e.detail(), Some(&want), "{e}");
    }

    fn context_remote_resolution_of_an_unroutable_address_fails() {
        // No route to TEST-NET-2 from the test host: the kernel refuses the
        // resolution at once (ENETUNREACH), it does not wait for the timeout.
        let r = rpma::device::get_ibv_context_timeout("198.51.100.77", ContextType::Remote, Duration::from_millis(500));
        let e = r.expect_err("no device reaches 198.51.100.77");
        assert_eq!(e.code(), RPMA_E_PROVIDER, "{e}");
        assert_eq!(e.errno(), Some(libc::ENETUNREACH), "{e}");
    }

    fn open_by_name_and_unknown_name() {
        let ctx = rpma::IbvContext::open(None).unwrap();
        let named = rpma::IbvContext::open(Some(&ctx.device_name())).unwrap();
        assert_eq!(named.device_name(), ctx.device_name());
        let e = rpma::IbvContext::open(Some("no-such-dev0")).unwrap_err();
        assert_eq!((e.code(), e.errno()), (RPMA_E_PROVIDER, Some(libc::ENODEV)));
        assert_eq!(e.detail(), Some(&Detail::NoDevice { addr: None, loopback: false }), "{e}");
    }

    fn peer_reports_probed_capabilities() {
        let ctx = rpma::device::get_ibv_context(&addr(), ContextType::Local).unwrap();
        let p = Peer::new(&ctx).unwrap();
        let c = p.capabilities();
        assert_eq!(c.odp, rpma::device::is_odp_capable(&ctx).unwrap());
        assert_eq!(p.is_odp_capable(), c.odp);
        assert_eq!(p.is_native_flush_supported(), c.native_flush);
        assert_eq!(p.is_native_atomic_write_supported(), c.native_atomic_write);
        println!("  capabilities of {}: {c:?}", p.device_name());
        if in_vm() {
            // rxe, measured: no ODP, both MW types; IBA 1.5 verbs from Linux 6.2
            // on, native flush only where libibverbs can post it (rdma-core 45+).
            let iba15 = rpma_harness::rxe_iba15();
            let lib_flush = rpma_harness::rdma_core_release().is_some_and(|r| r >= 45);
            assert!(!c.iwarp, "{c:?}");
            match rpma_harness::expect_odp() {
                Some(odp) => assert_eq!(c.odp, odp, "{c:?}"),
                None => println!("  ODP not asserted: kernel {:?} was not measured", rpma_harness::kernel_version()),
            }
            assert_eq!((c.native_flush, c.native_atomic_write), (iba15 && lib_flush, iba15), "{c:?}");
            assert!(c.mw_type1 && c.mw_type2, "{c:?}");
        }
    }

    fn reg_each_single_usage_flag_matches_table() {
        let p = peer();
        for u in Usage::all().iter() {
            if refused_on_dram(&p, u, AlignedBuf::new(4096).unwrap()) {
                continue;
            }
            let mr = MrLocal::reg(&p, AlignedBuf::new(4096).unwrap(), u).unwrap_or_else(|e| panic!("{u:?}: {e}"));
            let want = expected_access(&p, u);
            assert_eq!(mr.access(), want, "{u:?}");
            assert_eq!(mr.access(), p.usage_to_access(u), "{u:?}");
            assert!(!mr.is_odp());
            assert_eq!(mr.usage(), u);
            assert_eq!(mr.size(), 4096);
            println!("  {u:?} -> {:?} rkey {:#x}", mr.access(), mr.rkey());
        }
    }

    fn reg_combinations_match_table() {
        let p = peer();
        let combos = [
            Usage::READ_SRC | Usage::WRITE_DST,
            Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT,
            Usage::WRITE_DST | Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT,
            Usage::SEND | Usage::RECV,
            Usage::READ_DST | Usage::WRITE_SRC,
            Usage::all(),
        ];
        for u in combos {
            if refused_on_dram(&p, u, vec![0u8; 8192]) {
                continue;
            }
            let mr = MrLocal::reg(&p, vec![0u8; 8192], u).unwrap_or_else(|e| panic!("{u:?}: {e}"));
            assert_eq!(mr.access(), expected_access(&p, u), "{u:?}");
        }
    }

    fn reg_invalid_arguments_are_inval() {
        let p = peer();
        let e = MrLocal::reg(&p, Vec::new(), Usage::READ_SRC).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert_eq!(e.detail(), Some(&Detail::Empty { what: Arg::Memory }), "{e}");
        let e = MrLocal::reg(&p, vec![0u8; 64], Usage::empty()).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert_eq!(e.detail(), Some(&Detail::BadUsage { bits: 0 }), "{e}");
        let e = MrLocal::reg(&p, vec![0u8; 64], Usage::from_bits_retain(0xc00)).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert_eq!(e.detail(), Some(&Detail::BadUsage { bits: 0xc00 }), "{e}");
        let e = MrLocal::reg_zero_based(&p, Vec::new(), Usage::READ_SRC).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::Empty { what: Arg::Memory }), "{e}");
        // Above max_mr_size is not reachable here: rxe reports u64::MAX
        // (the bound's arithmetic is unit-tested in rpma::mr).
    }

    fn reg_all_memory_kinds_and_dereg_returns_them() {
        let p = peer();
        let mut v = vec![1u8; 100];
        v[99] = 7;
        let mr = MrLocal::reg(&p, v, Usage::READ_SRC).unwrap();
        assert_eq!(mr.size(), 100);
        let v = mr.dereg().unwrap();
        assert_eq!((v.len(), v[99]), (100, 7));

        let mr = MrLocal::reg(&p, vec![2u8; 33].into_boxed_slice(), Usage::WRITE_DST).unwrap();
        assert_eq!(mr.dereg().unwrap()[32], 2);

        let mut backing = [0u8; 256];
        {
            // SAFETY: the region is deregistered (checked) before `backing` is
            // read again or goes out of scope.
            #[allow(unsafe_code)]
            let raw = unsafe { rpma::RawMemory::new(backing.as_mut_ptr(), backing.len()) };
            let mr = MrLocal::reg(&p, raw, Usage::RECV).unwrap();
            mr.write_at(250, b"abcdef").unwrap();
            let mut out = [0u8; 6];
            mr.read_at(250, &mut out).unwrap();
            assert_eq!(&out, b"abcdef");
            mr.dereg().unwrap();
        }
        assert_eq!(&backing[250..], b"abcdef");
    }

    /// memmap2's `MmapMut` (feature `memmap2`) as registered memory: an
    /// anonymous mapping and a file's mapping on the server, each written
    /// and read back by the client over RDMA; the bytes are in the
    /// mappings handed back by `dereg`, and in the file.
    fn memmap2_mappings_take_rdma() {
        use rpma::ops::{Read, Write};
        let sp = peer();
        let usage = Usage::WRITE_DST | Usage::READ_SRC;
        let anon = MrLocal::reg(&sp, memmap2::MmapMut::map_anon(8192).unwrap(), usage).unwrap();
        let path = std::env::temp_dir().join(format!("rpma-mmap-{}", std::process::id()));
        let file = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        file.set_len(4096).unwrap();
        // SAFETY: the file is this test's own: no one else writes or
        // truncates it while it is mapped.
        let fmap = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        let filed = MrLocal::reg(&sp, fmap, usage).unwrap();
        let (a, f) = (anon.descriptor(), filed.descriptor());
        let split = 1 + a.len();
        let mut pdata = vec![a.len() as u8];
        pdata.extend_from_slice(&a);
        pdata.extend_from_slice(&f);
        let (c, s) = common::Pair::new().server_peer(&sp).server_pdata(pdata).connect();
        let ra = MrRemote::from_descriptor(&c.private_data()[1..split]).unwrap();
        let rf = MrRemote::from_descriptor(&c.private_data()[split..]).unwrap();
        assert_eq!((ra.size(), rf.size()), (8192, 4096));
        let local = MrLocal::reg(c.peer(), AlignedBuf::new(4096).unwrap(), Usage::WRITE_SRC | Usage::READ_DST).unwrap();
        local.write_at(0, b"into the anonymous mapping").unwrap();
        local.write_at(64, b"into the file").unwrap();
        let wait = |ctx: u64| {
            let wc = c.cq().next_completion(common::T).unwrap();
            assert_eq!((wc.op_context, wc.status.is_success()), (ctx, true), "{wc:?}");
        };
        c.post(Write::new(&ra, 8000, &local, 0, 26).op_context(1)).unwrap();
        wait(1);
        c.post(Write::new(&rf, 100, &local, 64, 13).op_context(2)).unwrap();
        wait(2);
        c.post(Read::new(&local, 1024, &ra, 8000, 26).op_context(3)).unwrap();
        wait(3);
        c.post(Read::new(&local, 2048, &rf, 100, 13).op_context(4)).unwrap();
        wait(4);
        let (mut x, mut y) = ([0u8; 26], [0u8; 13]);
        local.read_at(1024, &mut x).unwrap();
        local.read_at(2048, &mut y).unwrap();
        assert_eq!((&x, &y), (b"into the anonymous mapping", b"into the file"), "read back over RDMA");
        common::close(c, s);
        let map = anon.dereg().unwrap();
        assert_eq!(&map[8000..8026], b"into the anonymous mapping");
        let fmap = filed.dereg().unwrap();
        assert_eq!(&fmap[100..113], b"into the file");
        fmap.flush().unwrap();
        drop(fmap);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[100..113], b"into the file", "the device's write is in the file");
        std::fs::remove_file(&path).unwrap();
        println!("  an anonymous and a file mapping written and read over RDMA; the write is in the file");
    }

    /// A hugetlbfs memfd sealed only against shrinking, as another process
    /// would hand it over: `MappedFile::from_sealed_file` seals it against
    /// hole punching and allocates every huge page, so another handle's
    /// punch fails (before, it succeeded, and the next `read_at` died of
    /// SIGBUS), the region takes an RDMA write and reads it back, and a
    /// file the pool cannot fill is an error, never a SIGBUS later.
    fn a_hugetlbfs_mapping_loses_no_page_to_another_handle() {
        use std::os::fd::{AsFd, AsRawFd, FromRawFd};
        const HUGE: usize = 2 << 20;
        let free = || -> usize {
            let m = std::fs::read_to_string("/proc/meminfo").unwrap();
            let line = m.lines().find(|l| l.starts_with("HugePages_Free:")).expect("HugePages_Free in /proc/meminfo");
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        };
        // The VM is the test's own: reserve pages there (and give them back).
        struct Reserved(Option<String>);
        impl Drop for Reserved {
            fn drop(&mut self) {
                if let Some(old) = &self.0 {
                    let _ = std::fs::write("/proc/sys/vm/nr_hugepages", old);
                }
            }
        }
        let _reserved = if in_vm() {
            let old = std::fs::read_to_string("/proc/sys/vm/nr_hugepages").unwrap();
            std::fs::write("/proc/sys/vm/nr_hugepages", "4").unwrap();
            Reserved(Some(old))
        } else {
            Reserved(None)
        };
        if free() < 2 {
            assert!(!in_vm(), "the VM reserved 4 huge pages");
            println!("  not run here: this host has fewer than 2 free 2 MiB huge pages (sysctl vm.nr_hugepages)");
            return;
        }
        let memfd = |len: u64| {
            // SAFETY: a NUL-terminated name; a new fd, owned from here.
            let fd = unsafe {
                libc::memfd_create(
                    c"rpma-huge".as_ptr(),
                    libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | libc::MFD_HUGETLB,
                )
            };
            assert!(fd >= 0, "memfd_create(MFD_HUGETLB): {}", std::io::Error::last_os_error());
            // SAFETY: as above.
            let f = unsafe { std::fs::File::from_raw_fd(fd) };
            f.set_len(len).unwrap();
            // SAFETY: fcntl on a live fd, integer arguments.
            assert_eq!(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) }, 0);
            f
        };
        let f = memfd(HUGE as u64);
        let other = std::fs::File::from(f.as_fd().try_clone_to_owned().unwrap());
        let m = rpma::MappedFile::from_sealed_file(f, HUGE).unwrap();
        // SAFETY: fallocate on a live fd, integer arguments.
        let rc = unsafe {
            libc::fallocate(other.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, HUGE as i64)
        };
        assert_eq!(
            (rc, std::io::Error::last_os_error().raw_os_error()),
            (-1, Some(libc::EPERM)),
            "the punch is refused"
        );
        let p = peer();
        let mr = MrLocal::reg(&p, m, Usage::WRITE_DST | Usage::READ_SRC).unwrap();
        mr.write_at(HUGE - 8, b"last8byt").unwrap();
        let (c, s) = common::Pair::new().server_peer(&p).server_pdata(mr.descriptor().to_vec()).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let src = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::WRITE_SRC).unwrap();
        src.write_at(0, b"rdma-hug").unwrap();
        c.write(&remote, (HUGE / 2) as u64, &src, 0, 8, rpma::Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert!(c.cq().next_completion(common::T).unwrap().status.is_success());
        let back = MrLocal::reg(c.peer(), AlignedBuf::new(8).unwrap(), Usage::READ_DST).unwrap();
        c.read(&back, 0, &remote, (HUGE - 8) as u64, 8, rpma::Flags::COMPLETION_ALWAYS, 2).unwrap();
        assert!(c.cq().next_completion(common::T).unwrap().status.is_success());
        let mut got = [0u8; 8];
        back.read_at(0, &mut got).unwrap();
        assert_eq!(&got, b"last8byt");
        mr.read_at(HUGE / 2, &mut got).unwrap();
        assert_eq!(&got, b"rdma-hug");
        common::close(c, s);
        drop(mr);
        // More pages than the pool has free: refused now.
        let too_big = (free() + 1) * HUGE;
        let e = rpma::MappedFile::from_sealed_file(memfd(too_big as u64), too_big).unwrap_err();
        assert_eq!(e.code(), RPMA_E_PROVIDER, "{e}");
    }

    fn local_copies_are_bounds_checked() {
        let p = peer();
        let mr = MrLocal::reg(&p, AlignedBuf::new(64).unwrap(), Usage::WRITE_SRC).unwrap();
        let e = mr.write_at(60, &[0u8; 5]).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert!(matches!(e.detail(), Some(Detail::OutOfRange { offset: 60, len: 5, size: 64, .. })), "{e}");
        let e = mr.read_at(usize::MAX, &mut [0u8; 2]).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
    }

    fn descriptor_describes_the_registration() {
        let p = peer();
        let mr =
            MrLocal::reg(&p, AlignedBuf::new(12288).unwrap(), Usage::READ_SRC | Usage::FLUSH_TYPE_VISIBILITY).unwrap();
        let d = mr.descriptor();
        assert_eq!(d.len(), rpma::MR_DESCRIPTOR_SIZE);
        assert_eq!(u64::from_le_bytes(d[0..8].try_into().unwrap()), mr.ptr() as u64);
        assert_eq!(u64::from_le_bytes(d[8..16].try_into().unwrap()), 12288);
        assert_eq!(u32::from_le_bytes(d[16..20].try_into().unwrap()), mr.rkey());
        assert_eq!(d[20], 0x11);
        let r = MrRemote::from_descriptor(&d).unwrap();
        assert_eq!((r.addr(), r.size(), r.rkey()), (mr.ptr() as u64, 12288, mr.rkey()));
        assert_eq!(r.flush_type(), Usage::FLUSH_TYPE_VISIBILITY);
        assert_ne!(mr.rkey(), 0, "a remotely readable region has an rkey");
    }

    fn region_keeps_the_protection_domain_alive() {
        let mr = {
            let p = peer();
            MrLocal::reg(&p, vec![0u8; 4096], Usage::READ_SRC).unwrap()
        }; // the Peer handle is gone; the PD must live on with the region
        assert_eq!(mr.peer().device_name(), peer().device_name());
        let _ = mr.descriptor();
        mr.dereg().unwrap();
    }

    fn advise_is_checked_then_mapped() {
        let p = peer();
        let mr = MrLocal::reg(&p, AlignedBuf::new(4096).unwrap(), Usage::READ_SRC).unwrap();
        let e = mr.advise(4000, 200, Advice::PrefetchWrite, AdviseFlags::FLUSH).unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert!(matches!(e.detail(), Some(Detail::OutOfRange { offset: 4000, len: 200, .. })), "{e}");
        let r = mr.advise(0, 4096, Advice::PrefetchWrite, AdviseFlags::FLUSH);
        if in_vm() {
            // rxe has no ibv_advise_mr: librpma's mapping EOPNOTSUPP -> NOSUPP.
            let e = r.unwrap_err();
            assert_eq!(e.code(), RPMA_E_NOSUPP, "{e}");
        } else {
            println!("  advise on a native device: {r:?}");
        }
    }

    /// FS-DAX memory cannot be pinned (`ibv_reg_mr` fails with EOPNOTSUPP): the
    /// ODP fallback retries with ON_DEMAND on an ODP-capable device and is
    /// refused, with PROVIDER, on one without ODP (rxe). The harness VM provides
    /// emulated pmem with an FS-DAX ext4 (RPMA_TEST_PMEM_DIR).
    fn odp_fallback_per_capability_on_fsdax() {
        let p = peer();
        // Plain memory never needs the fallback.
        let mr = MrLocal::reg(&p, vec![0u8; 1 << 20], Usage::WRITE_DST).unwrap();
        assert!(!mr.is_odp() && !mr.access().contains(Access::ON_DEMAND));
        // A shared mapping of a non-DAX file registers normally.
        let tmp = std::env::temp_dir().join(format!("rpma-test-{}", std::process::id()));
        // SAFETY: the test's own file, never truncated while mapped.
        #[allow(unsafe_code)]
        let f = unsafe { rpma::MappedFile::open(&tmp, 1 << 16) }.unwrap();
        assert!(!f.is_pmem(), "a page-cache file is not persistent memory");
        let mr = MrLocal::reg(&p, f, Usage::WRITE_DST | Usage::READ_SRC).unwrap();
        assert!(!mr.is_odp());
        drop(mr);
        let _ = std::fs::remove_file(&tmp);
        // A sealed anonymous file (the safe constructor) registers the same way.
        let f = rpma::MappedFile::sealed("rpma-device-mr", 1 << 16).unwrap();
        let mr = MrLocal::reg(&p, f, Usage::WRITE_DST | Usage::READ_SRC).unwrap();
        assert!(!mr.is_odp());
        drop(mr.dereg().unwrap());

        let Ok(dir) = std::env::var("RPMA_TEST_PMEM_DIR") else {
            assert!(!in_vm(), "the harness VM always provides RPMA_TEST_PMEM_DIR");
            println!("  no RPMA_TEST_PMEM_DIR on this native host: FS-DAX case not run");
            return;
        };
        // SAFETY: as above, on the VM's FS-DAX pmem.
        #[allow(unsafe_code)]
        let mut f = unsafe { rpma::MappedFile::open(format!("{dir}/odp-test"), 2 << 20) }.unwrap();
        // FS-DAX: mapped with MAP_SYNC, persisted by a CPU cache flush.
        assert!(f.is_pmem(), "{} on FS-DAX is persistent memory (MAP_SYNC)", f.path().display());
        f.write_at(4096, b"durable").unwrap();
        f.persist_range(4096, 7).unwrap();
        println!("  FS-DAX file mapped with MAP_SYNC: is_pmem, persisted by cache flush");
        let r = MrLocal::reg(&p, f, Usage::WRITE_DST | Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT);
        if p.is_odp_capable() {
            let mut mr = r.expect("ODP retry succeeds on an ODP-capable device");
            assert!(mr.is_odp() && mr.access().contains(Access::ON_DEMAND));
            assert!(mr.is_pmem(), "the registered FS-DAX file is still persistent memory");
            println!("  FS-DAX registered with On-Demand Paging: access {:?}", mr.access());
            // Its descriptor offers the persistent flush, and a remote
            // writer's write + flush + read go through On-Demand Paging.
            // One packet at a page's start: rxe's ODP copy writes every
            // packet at the start of its page (docs/devices.md), which the
            // probe after it shows.
            common::persist_over_rdma(&p, &mr, 1 << 20, 512, mr.is_pmem());
            println!("  FS-DAX written, flushed (Persistent) and read back over RDMA");
            odp_offset_probe(&p, &mut mr);
        } else {
            let e = r.expect_err("no ODP: FS-DAX registration is refused");
            assert_eq!(e.code(), RPMA_E_PROVIDER, "{e}");
            assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
            assert_eq!(e.detail(), Some(&Detail::NoOdp), "the provider's bare EOPNOTSUPP gets its reason: {e}");
            println!("  refused as expected: {e}");
        }
    }

    /// The device is listed with its active port and the test's address
    /// among its GIDs' IPs, and the first errors name that address.
    fn discovery_and_first_errors() {
        let devs = rpma::device::devices().unwrap();
        let ctx = rpma::device::get_ibv_context(&addr(), ContextType::Local).unwrap();
        let d = devs.iter().find(|d| d.name == ctx.device_name()).expect("the test's device is listed");
        let ips: Vec<String> =
            d.ports.iter().flat_map(|p| &p.gids).filter_map(|g| g.ip).map(|ip| ip.to_string()).collect();
        assert!(d.ports.iter().any(|p| p.is_active()), "{d:?}");
        assert!(ips.contains(&addr()), "{} among {}'s addresses {ips:?}", addr(), d.name);
        println!("  {}: {} port(s), addresses {ips:?}", d.name, d.ports.len());
        let e = rpma::device::get_ibv_context("127.0.0.1", ContextType::Local).unwrap_err();
        assert_eq!(e.detail(), Some(&Detail::NoDevice { addr: Some("127.0.0.1".into()), loopback: true }), "{e}");
        // The hint is the subject: the address to use instead.
        assert!(e.to_string().contains(&format!("{} ({})", addr(), d.name)), "{e}");
        let e = rpma::IbvContext::open(Some("no-such-device0")).unwrap_err();
        assert_eq!(e.code(), RPMA_E_PROVIDER);
        assert!(e.to_string().contains(&d.name), "names the devices there are: {e}");
    }

    /// A region on 2 MiB huge pages, written and read back over RDMA with
    /// every byte checked; an empty pool is a typed error that says how to
    /// reserve pages. In the harness VM the test reserves the pages itself
    /// and gives them back; on another host it uses what is reserved there
    /// and changes nothing.
    fn a_huge_page_region_is_written_and_read_over_rdma() {
        const LEN: usize = 4 << 20;
        let reserved = in_vm().then(|| Reserved::set(4));
        let buf = match HugeBuf::new(LEN, HugePage::Size2M) {
            Ok(b) => b,
            Err(e) if !in_vm() => {
                assert!(matches!(e.detail(), Some(Detail::NoHugePages { page_size, .. }) if *page_size == 2 << 20));
                println!("  no free 2 MiB pages on this host, refused as typed: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!((buf.len(), buf.page()), (LEN, HugePage::Size2M));
        let sp = peer();
        let mr = MrLocal::reg(&sp, buf, Usage::WRITE_DST | Usage::READ_SRC).unwrap();
        let (c, s) = common::Pair::new().server_peer(&sp).server_pdata(mr.descriptor().to_vec()).connect();
        let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
        let pattern: Vec<u8> = (0..LEN).map(|i| (i * 31 % 253) as u8).collect();
        let src = MrLocal::reg(c.peer(), AlignedBuf::new(LEN).unwrap(), Usage::WRITE_SRC).unwrap();
        src.write_at(0, &pattern).unwrap();
        c.write(&remote, 0, &src, 0, LEN, Flags::COMPLETION_ALWAYS, 1).unwrap();
        assert!(c.cq().next_completion(common::T).unwrap().status.is_success());
        let dst = MrLocal::reg(c.peer(), AlignedBuf::new(LEN).unwrap(), Usage::READ_DST).unwrap();
        c.read(&dst, 0, &remote, 0, LEN, Flags::COMPLETION_ALWAYS, 2).unwrap();
        assert!(c.cq().next_completion(common::T).unwrap().status.is_success());
        let (mut landed, mut back) = (vec![0u8; LEN], vec![0u8; LEN]);
        mr.read_at(0, &mut landed).unwrap();
        dst.read_at(0, &mut back).unwrap();
        assert!(landed == pattern && back == pattern, "every byte, at the server and read back");
        println!("  4 MiB on two 2 MiB pages: written and read back over RDMA");
        common::close(c, s);
        drop(mr.dereg().unwrap());
        if reserved.is_some() {
            // An empty pool: typed, with what to do.
            let _empty = Reserved::set(0);
            let e = HugeBuf::new(LEN, HugePage::Size2M).unwrap_err();
            assert_eq!(e.detail(), Some(&Detail::NoHugePages { page_size: 2 << 20, free: Some(0) }), "{e}");
            assert_eq!(e.errno(), Some(libc::ENOMEM), "{e}");
            println!("  {e}");
        }
        match HugeBuf::new(1, HugePage::Size1G) {
            Ok(b) => println!("  a 1 GiB page: {} bytes", b.len()),
            Err(e) => {
                assert!(matches!(e.detail(), Some(Detail::NoHugePages { page_size, .. }) if *page_size == 1 << 30));
                println!("  1 GiB pages: {e}");
            }
        }
    }

    /// Records carry their module as their target: `RUST_LOG` selects one
    /// module and leaves the others. A child of this binary, whose logger
    /// reads its own `RUST_LOG`, registers a region and connects a pair;
    /// `rpma::mr=debug` shows the registration's debug line and not the
    /// connection's, `rpma::conn=debug` the other way round. The same in a
    /// release build: `cargo test --release --test device_mr
    /// rust_log_selects_records_by_module` (docs/testing.md).
    fn rust_log_selects_records_by_module() {
        if std::env::var_os("RPMA_LOG_CHILD").is_some() {
            let p = peer();
            let _mr = MrLocal::reg(&p, AlignedBuf::new(4096).unwrap(), Usage::READ_SRC).unwrap();
            let (c, s) = common::Pair::new().connect();
            common::close(c, s);
            return;
        }
        let child = |filter: &str| {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "rust_log_selects_records_by_module"])
                .env("RPMA_LOG_CHILD", "1")
                .env("RUST_LOG", filter)
                .env_remove("RUST_LOG_STYLE")
                .output()
                .expect("the test binary runs again");
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let mr_line = |l: &&str| l.contains("rpma::mr") && l.contains("registered 4096 bytes");
        let conn_line = |l: &&str| l.contains("rpma::conn_req") && l.contains("QP limits");
        let err = child("rpma::mr=debug");
        assert_eq!(err.lines().filter(mr_line).count(), 1, "the registration's debug line, under its module: {err}");
        assert_eq!(err.lines().filter(conn_line).count(), 0, "another module's record passed the filter: {err}");
        let err = child("rpma::conn=debug");
        assert_eq!(err.lines().filter(conn_line).count(), 2, "each side's QP limits, under its module: {err}");
        assert_eq!(err.lines().filter(mr_line).count(), 0, "another module's record passed the filter: {err}");
    }

    /// A registration over the memlock limit says so and what to do. Root
    /// (the harness VM) pins past any limit (CAP_IPC_LOCK), so the check
    /// runs in a child as `nobody` with a 64 KiB limit.
    fn memlock_limit_says_what_to_do() {
        if std::env::var_os("RPMA_MEMLOCK_CHILD").is_some() {
            let p = peer();
            let e = MrLocal::reg(&p, AlignedBuf::new(1 << 20).unwrap(), Usage::READ_SRC).unwrap_err();
            assert_eq!(e.detail(), Some(&Detail::MemlockLimit { limit: 65536 }), "{e}");
            // The hint is the subject: how to raise it.
            assert!(e.to_string().contains("ulimit -l"), "{e}");
            println!("  {e}");
            return;
        }
        // nobody runs a copy of this binary: the checkout may sit under a
        // directory only its owner can enter (a home directory of mode
        // 0700). The copy's directory goes on every exit path.
        struct Copy(std::path::PathBuf);
        impl Drop for Copy {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = Copy(std::env::temp_dir().join(format!("rpma-memlock-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = dir.0.join("device_mr");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let st = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"])
            .args(["prlimit", "--memlock=65536:65536", "--"])
            .arg(&exe)
            .args(["--exact", "memlock_limit_says_what_to_do"])
            .env("RPMA_MEMLOCK_CHILD", "1")
            .status()
            .expect("setpriv and prlimit (util-linux)");
        assert!(st.success(), "the child as nobody with a 64 KiB memlock limit: {st}");
    }

    /// A device the kernel has but libibverbs cannot open (no provider
    /// library: here, a child in its own mount namespace where libibverbs'
    /// provider configuration, `/etc/libibverbs.d`, is empty) is named with
    /// what to install.
    fn a_missing_provider_says_what_to_do() {
        if std::env::var_os("RPMA_NOPROVIDER_CHILD").is_some() {
            let e = rpma::IbvContext::open(None).unwrap_err();
            assert!(matches!(e.detail(), Some(Detail::NoDevice { addr: None, .. })), "{e}");
            // The hint is the subject: what is missing and what to install.
            let t = e.to_string();
            assert!(t.contains("provider library") && t.contains("ibverbs-providers"), "{t}");
            println!("  {t}");
            return;
        }
        let empty = std::env::temp_dir().join(format!("rpma-no-providers-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let st = std::process::Command::new("unshare")
            .args(["-m", "sh", "-c", "mount --bind \"$0\" /etc/libibverbs.d && exec \"$@\""])
            .arg(&empty)
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "a_missing_provider_says_what_to_do"])
            .env("RPMA_NOPROVIDER_CHILD", "1")
            .status()
            .expect("unshare (util-linux)");
        let _ = std::fs::remove_dir(&empty);
        assert!(st.success(), "the child without providers: {st}");
    }

    fn many_regions_register_and_release() {
        let p = peer();
        let mut v = Vec::new();
        for i in 0..256 {
            v.push(MrLocal::reg(&p, vec![i as u8; 512], Usage::READ_SRC | Usage::WRITE_DST).unwrap());
        }
        let rkeys: std::collections::HashSet<u32> = v.iter().map(|m| m.rkey()).collect();
        assert_eq!(rkeys.len(), 256, "every region has its own rkey");
        for m in v {
            m.dereg().unwrap();
        }
    }

    /// Zero-based registration: the descriptor carries (near-)0 instead of the
    /// process address; the region is otherwise the same.
    fn zero_based_descriptor_hides_the_address() {
        let p = peer();
        let mr =
            MrLocal::reg_zero_based(&p, AlignedBuf::new(8192).unwrap(), Usage::READ_SRC | Usage::WRITE_DST).unwrap();
        assert!(mr.is_zero_based());
        let r = MrRemote::from_descriptor(&mr.descriptor()).unwrap();
        assert_eq!((r.addr(), r.size(), r.rkey()), (0, 8192, mr.rkey()));
        // Unaligned memory keeps its offset within the page, nothing more.
        let v = vec![0u8; 5000];
        let off = v.as_ptr() as u64 % AlignedBuf::page_size() as u64;
        let mr = MrLocal::reg_zero_based(&p, v, Usage::READ_SRC).unwrap();
        assert_eq!(MrRemote::from_descriptor(&mr.descriptor()).unwrap().addr(), off);
    }
});

/// Reported, not asserted: where a one-packet write to the middle of a
/// page of an ODP region lands. On rxe (Linux's `__rxe_odp_mr_copy`) it
/// lands at the page's start; a fixed kernel or another device prints
/// 512..767.
fn odp_offset_probe<M: rpma::RegMemory + Send + Sync + 'static>(sp: &Peer, mr: &mut MrLocal<M>) {
    use rpma::Flags;
    let page = 1 << 20;
    mr.write_at(page, &[0u8; 4096]).unwrap();
    let (c, s) = common::Pair::new().server_peer(sp).server_pdata(mr.descriptor().to_vec()).connect();
    let remote = MrRemote::from_descriptor(c.private_data()).unwrap();
    let src = MrLocal::reg(c.peer(), vec![0xa5u8; 256], Usage::WRITE_SRC).unwrap();
    c.write(&remote, (page + 512) as u64, &src, 0, 256, Flags::COMPLETION_ALWAYS, 1).unwrap();
    let wc = c.cq().next_completion(common::T).unwrap();
    let mut got = vec![0u8; 4096];
    mr.read_at(page, &mut got).unwrap();
    let landed: Vec<usize> = (0..4096).filter(|&i| got[i] == 0xa5).collect();
    println!(
        "  ODP offset probe: 256 bytes written at page offset 512, completion {:?}, landed at {:?}..{:?} ({} bytes)",
        wc.status,
        landed.first(),
        landed.last(),
        landed.len()
    );
    common::close(c, s);
}
