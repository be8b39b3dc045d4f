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
        /// The argument (`"read: dst"`).
        what: String,
        /// The offset asked for.
        offset: u64,
        /// The length asked for.
        len: u64,
        /// The size of the region.
        size: u64,
    },
    /// A region lacks usages the operation needs.
    UsageMissing {
        /// The argument (`"write: src"`).
        what: String,
        /// The usages to add (register the region with them).
        missing: crate::access::Usage,
    },
    /// A length or count over a limit: what one work request carries
    /// (4 GiB - 1), a limit of the connection (inline bytes, list
    /// elements), of the device (queue sizes, scatter/gather elements), of
    /// the connection's setup (private data), of a chain (operations) or of
    /// a message slot (bytes).
    TooLong {
        /// The argument (`"write_inline"`, `"ConnCfg sq_size"`).
        what: String,
        /// The length or count asked for.
        len: u64,
        /// The most allowed.
        max: u64,
    },
    /// An offset or address that must be a multiple of `align` is not
    /// (8-byte remote atomics, the atomic write).
    Misaligned {
        /// The argument (`"atomic_write: dst_offset"`).
        what: String,
        /// The offset or address asked for.
        value: u64,
        /// The alignment it needs.
        align: u64,
    },
    /// An argument is empty where at least one byte or element is needed:
    /// memory of 0 bytes to register, a scatter/gather list without
    /// elements.
    Empty {
        /// The argument (`"write_sg: src"`).
        what: String,
    },
    /// A region, window, SRQ or shared completion queue belongs to another
    /// peer (protection domain), or a window to another connection, than
    /// the one it is used with.
    Foreign {
        /// The argument (`"write_sg: src[1]"`, `"the SRQ"`).
        what: String,
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
    /// The connection is closed (disconnected, lost or rejected).
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
    /// An awaited operation (`rpma::aio::AsyncConn`) completed with an
    /// error status ([`Error::Provider`]).
    Completed {
        /// The device's `ibv_wc_status`
        /// ([`WcStatus(status)`](crate::WcStatus): its name and whether to
        /// retry).
        status: u32,
    },
}
