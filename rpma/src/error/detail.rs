//! [`Detail`]: the typed cause of an [`Error`].

#[allow(unused_imports)] // the docs' links
use super::Error;

/// The cause of an error, typed, for the failures callers handle (not in
/// librpma, whose codes [`Error::code`] keeps): match it instead of the
/// message.
///
/// ```
/// # #[allow(dead_code)]
/// # fn f(conn: &rpma::Conn, dst: &rpma::MrLocal<rpma::AlignedBuf>, src: &rpma::MrRemote) {
/// use rpma::error::Detail;
/// match conn.read(dst, 0, src, 0, 1 << 20, rpma::Flags::COMPLETION_ALWAYS, 0) {
///     Err(e) if matches!(e.detail(), Some(Detail::OutOfRange { .. })) => { /* a shorter read */ }
///     Err(e) if matches!(e.detail(), Some(Detail::QueueFull)) => { /* reap, then again */ }
///     _ => {}
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Detail {
    /// `offset + len` exceeds the `size` of the region (or list) the
    /// argument `what` names.
    OutOfRange {
        /// The argument ([`Arg::Dst`] for `read`'s `dst`).
        what: Arg,
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: u64,
        /// The size of the region.
        size: u64,
    },
    /// A region lacks usages the operation needs.
    UsageMissing {
        /// The argument ([`Arg::Src`] for `write`'s `src`).
        what: Arg,
        /// The usages to add (register the region with them).
        missing: crate::access::Usage,
    },
    /// A length or count over a limit: what one work request carries
    /// (4 GiB - 1), a limit of the connection (inline bytes, list
    /// elements), of the device (queue sizes, scatter/gather elements), of
    /// the connection's setup (private data), of a chain (operations) or of
    /// a message slot (bytes).
    TooLong {
        /// The argument or setting ([`Arg::Data`] for an inline write,
        /// [`Arg::SqSize`]).
        what: Arg,
        /// The length or count asked for.
        len: u64,
        /// The most allowed.
        max: u64,
    },
    /// An offset or address that must be a multiple of `align` is not
    /// (8-byte remote atomics, the atomic write).
    Misaligned {
        /// The side whose offset it is ([`Arg::Dst`] for `atomic_write`).
        what: Arg,
        /// The offset or address asked for.
        value: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// An argument is empty where at least one byte or element is needed:
    /// memory of 0 bytes to register, a scatter/gather list without
    /// elements.
    Empty {
        /// The argument ([`Arg::Src`] for `write_sg`'s `src`).
        what: Arg,
    },
    /// A region, window, SRQ or shared completion queue belongs to another
    /// peer (protection domain), or a window to another connection, than
    /// the one it is used with.
    Foreign {
        /// The argument ([`Arg::SrcElement(1)`](Arg::SrcElement),
        /// [`Arg::Srq`]).
        what: Arg,
    },
    /// The region is held ([`Error::Again`]): `in_flight` operations using
    /// it are in flight (reap their completions) and `windows` memory
    /// windows are bound over it (invalidate them and reap the completion,
    /// or drop them); both 0 when another reference holds it. Release
    /// them, then call again.
    RegionBusy {
        /// Operations in flight that use the region.
        in_flight: u64,
        /// Memory windows bound over the region.
        windows: u64,
    },
    /// A range of the region is in use in a way that conflicts with the
    /// call ([`Error::Again`]): `len` bytes at `offset` (the call's range)
    /// overlap a range that `by` uses. The device's uses end with the
    /// completions of the operations (reap them), the CPU's with the call
    /// that stages or reads (retry). Ranges closer than the region's
    /// [`granule`](crate::MrLocal::granule) count as overlapping.
    RangeBusy {
        /// Start of the call's range in the region.
        offset: u64,
        /// Its length in bytes.
        len: u64,
        /// The use it conflicts with.
        by: RangeUse,
    },
    /// The shared completion queue has no room for the connection:
    /// `reserved` of its `size` entries are reserved and the connection
    /// needs `need` more. Create the shared CQ larger, give the connection
    /// smaller queues, or use another shared CQ.
    CqFull {
        /// Entries already reserved by the CQ's connections.
        reserved: u64,
        /// The CQ's size in entries.
        size: u64,
        /// Entries the connection needs.
        need: u64,
    },
    /// The send queue has no free slot now ([`Error::Again`]): reap
    /// completions and post again.
    QueueFull,
    /// The send queue's last free slot is kept for a signaled operation
    /// ([`Error::Again`]): the operations before it are all unsignaled, so
    /// reaping finds nothing to retire them. Post this one (or another)
    /// with [`Flags::COMPLETION_ALWAYS`](crate::Flags::COMPLETION_ALWAYS)
    /// and reap its completion, which retires them.
    SignalNeeded,
    /// The provider failed the post but may have queued the operation
    /// ([`Error::Provider`]): its memory stays held until the connection's
    /// completions account for it, as for a posted operation.
    MaybeQueued,
    /// The connection is closed (disconnected, lost or rejected), or is
    /// gone: a type 2 memory window bound on it was deallocated with it.
    Closed,
    /// The device, the connection or the remote side does not support
    /// what was asked ([`Error::NoSupp`]).
    Unsupported,
    /// The region is registered with remote access (`access`: its
    /// `IBV_ACCESS_*` bits): its own rkey reaches it from every connection
    /// of its peer, so a range of it cannot be exported to one connection
    /// only ([`Conn::export`](crate::Conn::export)). Register it with
    /// [`Usage::MW_BIND`](crate::Usage::MW_BIND) and no remote usage.
    Exposed {
        /// The region's access flags.
        access: u32,
    },
    /// No RDMA device is there for what was asked: the host has none (or
    /// none by that name; `addr` is `None`), or none has the address
    /// `addr` ([`Error::Provider`], with the provider's errno). The message
    /// says what to do; [`device::devices`](crate::device::devices) lists
    /// what there is.
    NoDevice {
        /// The address asked for, when one was.
        addr: Option<String>,
        /// Whether that address is a loopback one (no RDMA device is on
        /// the loopback interface).
        loopback: bool,
    },
    /// A registration could not pin its memory ([`Error::Provider`],
    /// `ENOMEM`) while the process's memlock limit (`RLIMIT_MEMLOCK`,
    /// `ulimit -l`) is `limit` bytes: raise the limit, or register less.
    MemlockLimit {
        /// The soft limit, in bytes.
        limit: u64,
    },
    /// A [`HugeBuf`](crate::HugeBuf) found too few free huge pages of
    /// `page_size` bytes (`free` of them; [`Error::NoMem`]), or no pool of
    /// that size at all (`free` is `None`; [`Error::NoSupp`]). The message
    /// says how to reserve pages.
    NoHugePages {
        /// The page size asked for, in bytes.
        page_size: u64,
        /// The pool's free pages, when the system has that pool.
        free: Option<u64>,
    },
    /// A file handed to [`MappedFile::from_sealed_file`](crate::MappedFile::from_sealed_file)
    /// cannot be sealed so that no handle can remove its pages: it must
    /// carry `F_SEAL_SHRINK` and still take `F_SEAL_FUTURE_WRITE` (no
    /// `F_SEAL_SEAL`), and must not be sealed against writes already (it
    /// could not be mapped writable). `seals` is what `F_GET_SEALS`
    /// reported (0 for a file that takes no seals).
    Unsealable {
        /// The file's seals (`F_SEAL_*` bits).
        seals: u32,
    },
    /// A connection attempt awaited by `rpma::aio` (`connect`, `accept`,
    /// `AsyncConn::connect`) ended with `event` instead of
    /// [`ConnEvent::Established`](crate::conn_event::ConnEvent::Established)
    /// ([`Error::Unknown`]): `Rejected` when the server refused it or
    /// nothing listens there, `Unreachable` when there is no route.
    NotEstablished {
        /// The connection's first event.
        event: crate::conn_event::ConnEvent,
    },
    /// An operation's flags are invalid ([`Error::Inval`]): empty, no
    /// completion mode (`FENCE` alone), or bits [`Flags`](crate::Flags)
    /// does not define.
    BadFlags {
        /// The flags' bits.
        bits: u32,
    },
    /// A registration's usage is invalid ([`Error::Inval`]): empty, or bits
    /// [`Usage`](crate::Usage) does not define.
    BadUsage {
        /// The usage's bits.
        bits: u32,
    },
    /// The CQ belongs to an async reaper (`rpma::aio::AsyncConn` or
    /// `AsyncSharedCq`), which alone polls and waits on it
    /// ([`Error::Inval`]): await the operations instead.
    Reaped,
    /// An `rpma::aio` type was made, or an awaited call made, outside a
    /// tokio runtime ([`Error::Inval`]).
    NoRuntime,
    /// A flush of type [`Persistent`](crate::FlushType::Persistent) to a
    /// peer that has not declared direct write to persistent memory
    /// ([`Error::NoSupp`]): apply its [`PeerCfg`](crate::PeerCfg) with
    /// [`Conn::apply_remote_peer_cfg`](crate::Conn::apply_remote_peer_cfg),
    /// or flush with [`Visibility`](crate::FlushType::Visibility). (A
    /// remote region registered without the flush's usage is
    /// [`UsageMissing`](Detail::UsageMissing), also `NoSupp`.)
    PeerNotPmem,
    /// Operation `index` of a chain cannot travel in it
    /// ([`Error::NoSupp`]): a chain holding a native atomic write or flush
    /// posts through the extended interface, which carries only RDMA write
    /// and read beside them on this connection. Post that operation on its
    /// own.
    NotInChain {
        /// The operation's place in the chain (0 first).
        index: u64,
    },
    /// The device grants a usage only on persistent memory
    /// ([`Error::Provider`], `EINVAL`): rxe with native flush refuses
    /// [`Usage::FLUSH_TYPE_PERSISTENT`](crate::Usage::FLUSH_TYPE_PERSISTENT)
    /// on DRAM. Register DRAM without it.
    NeedsPmem,
    /// The memory needs On-Demand Paging (a file on FS-DAX) and the device
    /// does not support it ([`Error::Provider`], `EOPNOTSUPP`).
    NoOdp,
    /// Bytes from the peer (or handed in as if from one) do not decode as
    /// `what` ([`Error::Inval`]): the peer speaks another layout or
    /// version, or the bytes are not a descriptor. `at` is the byte where
    /// decoding stopped (the length when they are too short).
    Malformed {
        /// What the bytes were decoded as.
        what: Wire,
        /// The byte where decoding stopped.
        at: u64,
    },
    /// A call that cannot succeed as written, whatever the device and the
    /// peer do: a bug in the calling code, which the message says how to
    /// change.
    Misuse(Misuse),
    /// An awaited operation (`rpma::aio::AsyncConn`) completed with an
    /// error status ([`Error::Provider`]).
    Completed {
        /// The device's `ibv_wc_status`
        /// ([`WcStatus(status)`](crate::WcStatus): its name and whether to
        /// retry).
        status: u32,
    },
}

/// What a [`Detail`] is about: the argument, or the setting, of the call
/// that was refused. Its message names the call too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Arg {
    /// The operation's source: a region (local or remote), or a whole
    /// scatter/gather list.
    Src,
    /// The operation's destination: a region, or a whole list.
    Dst,
    /// Element `index` (0 first) of the `src` list.
    SrcElement(usize),
    /// Element `index` (0 first) of the `dst` list.
    DstElement(usize),
    /// The data an operation carries itself: an inline write's bytes, an
    /// atomic write's 8 bytes.
    Data,
    /// A range of a region's own memory (`MrLocal::read_at`, `write_at`,
    /// `advise`).
    Range,
    /// The memory to register (`MrLocal::reg`, `rereg_memory`).
    Memory,
    /// The region a window is bound over (`bind_mw`'s `mr`).
    Region,
    /// The memory window.
    Window,
    /// The shared receive queue of a connection's configuration.
    Srq,
    /// The shared completion queue of a connection's configuration.
    SharedCq,
    /// The private data of a connection's setup.
    PrivateData,
    /// A message of [`Messages`](crate::messages::Messages) (its slot size).
    Message,
    /// The operations of a [`Chain`](crate::Chain).
    Chain,
    /// A timeout (`ConnCfg::set_timeout`, `get_ibv_context_timeout`).
    Timeout,
    /// The send queue's size (`ConnCfg::set_sq_size`).
    SqSize,
    /// The receive queue's size (`ConnCfg`, `SrqCfg`).
    RqSize,
    /// The completion queue's size (`ConnCfg::set_cq_size`,
    /// `SharedCq::new`).
    CqSize,
    /// The receive completion queue's size (`ConnCfg`, `SrqCfg`).
    RcqSize,
    /// Scatter/gather elements a send takes (`ConnCfg::set_max_send_sge`).
    MaxSendSge,
    /// Scatter/gather elements a receive takes
    /// (`ConnCfg::set_max_recv_sge`).
    MaxRecvSge,
}

/// How a range of a local region is in use ([`Detail::RangeBusy`]). The
/// device may read a range while the CPU reads it; every other pair
/// conflicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RangeUse {
    /// Operations in flight read it (a write's or send's source).
    DeviceReads,
    /// Operations in flight write it (a read's destination, a receive, an
    /// atomic's result, a window with remote write access bound over it).
    DeviceWrites,
    /// The CPU reads it ([`MrLocal::read_at`](crate::MrLocal::read_at),
    /// [`view_at`](crate::MrLocal::view_at)).
    CpuReads,
    /// The CPU writes it ([`MrLocal::write_at`](crate::MrLocal::write_at),
    /// [`update_at`](crate::MrLocal::update_at)).
    CpuWrites,
}

impl std::fmt::Display for RangeUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RangeUse::DeviceReads => "operations in flight read it",
            RangeUse::DeviceWrites => "operations in flight (or a bound window) write it",
            RangeUse::CpuReads => "the CPU is reading it",
            RangeUse::CpuWrites => "the CPU is writing it",
        })
    }
}

/// What a [`Detail::Malformed`] was decoded as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wire {
    /// A memory region descriptor (librpma's 21 bytes, or rpma's 23).
    MrDescriptor,
    /// A peer configuration descriptor (1 byte).
    PeerCfg,
    /// Private data in the examples' `common_data` layout.
    CommonData,
    /// A GPSPM flush request (protobuf).
    GpspmRequest,
    /// A GPSPM flush response (protobuf).
    GpspmResponse,
}

impl std::fmt::Display for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wire::MrDescriptor => "memory region descriptor",
            Wire::PeerCfg => "peer configuration descriptor",
            Wire::CommonData => "private data",
            Wire::GpspmRequest => "GPSPM flush request",
            Wire::GpspmResponse => "GPSPM flush response",
        })
    }
}

/// Which rule a [`Detail::Misuse`] broke: calls that cannot succeed as
/// written ([`Error::Inval`]). Nothing changed; the message says what to
/// change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Misuse {
    /// `bind_mw` of a window that is already bound: invalidate it first.
    WindowBound,
    /// The window is not bound (`invalidate_mw`, `Mw::descriptor`).
    WindowNotBound,
    /// `invalidate_mw` while an invalidation of the window is posted: reap
    /// its completion.
    InvalidationPosted,
    /// `bind_mw` with remote write or atomic access over a region without
    /// local write access.
    WindowNeedsLocalWrite,
    /// `bind_mw` with zero-based addressing of a type 1 window.
    ZeroBasedNeedsType2,
    /// The operation needs its own completion
    /// ([`Flags::COMPLETION_ALWAYS`](crate::Flags::COMPLETION_ALWAYS)):
    /// `invalidate_mw`, whose completion alone releases the region.
    CompletionNeeded,
    /// `Mw::remote_invalidated` with a completion that is not a successful
    /// receive.
    NotAReceive,
    /// `Mw::remote_invalidated` with a completion naming the window's rkey
    /// that no completion queue of the window's peer polled (built or
    /// copied by hand): the device's report is what releases the window.
    NotPolledHere,
    /// `Mw::remote_invalidated` with a receive that invalidated another
    /// rkey.
    OtherRkey,
    /// `Mw::remote_invalidated` with a receive naming no invalidated rkey:
    /// the provider does not report it, or the send carried none. Drop
    /// the window to release the region.
    NoInvalidatedRkey,
    /// A connection on a shared CQ with its own receive CQ (`rcq_size`) or
    /// a shared completion channel: the shared CQ takes its receives too.
    SharedCqSettings,
    /// A shared completion channel with an SRQ that has its own receive CQ.
    SrqChannel,
    /// `MrLocal::rereg` with neither a peer nor a usage to change.
    NothingToChange,
    /// A reference into a region a remote peer may write
    /// ([`Usage::WRITE_DST`](crate::Usage::WRITE_DST) or
    /// [`Usage::REMOTE_ATOMIC`](crate::Usage::REMOTE_ATOMIC)): copy with
    /// `read_at` and `write_at` instead.
    RemotelyWritable,
    /// A reference into memory another mapping or process may write
    /// ([`RegMemory::is_exclusive`](crate::memory::RegMemory::is_exclusive)
    /// is false): copy with `read_at` and `write_at` instead.
    SharedMemory,
}
