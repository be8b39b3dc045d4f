//! Usage intentions ([`Usage`], librpma's `RPMA_MR_USAGE_*`) and the verbs
//! access flags ([`Access`], `IBV_ACCESS_*`) they translate into: the one
//! home of librpma's usage → access table ([`usage_to_access`]).
//!
//! The same items are re-exported from [`crate::mr`] and the crate root.

use bitflags::bitflags;

bitflags! {
    /// How a region will be used (librpma's `RPMA_MR_USAGE_*`, same bits).
    /// Registration translates it into `IBV_ACCESS_*` flags, see
    /// [`Peer::usage_to_access`](crate::Peer::usage_to_access).
    ///
    /// With the `serde` feature it serializes as its flag names
    /// (`"READ_SRC | WRITE_DST"`) in human-readable formats and as its bits
    /// in binary ones (bitflags' own representation).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize), serde(transparent))]
    pub struct Usage: u16 {
        /// Source of RDMA reads issued by the remote side.
        const READ_SRC = 1 << 0;
        /// Destination of RDMA reads issued by this side.
        const READ_DST = 1 << 1;
        /// Source of RDMA writes issued by this side.
        const WRITE_SRC = 1 << 2;
        /// Destination of RDMA writes issued by the remote side.
        const WRITE_DST = 1 << 3;
        /// Target of flushes to global visibility.
        const FLUSH_TYPE_VISIBILITY = 1 << 4;
        /// Target of flushes to persistence.
        const FLUSH_TYPE_PERSISTENT = 1 << 5;
        /// Source of sends.
        const SEND = 1 << 6;
        /// Destination of receives.
        const RECV = 1 << 7;
        /// Memory windows may be bound over the region (rpma extension,
        /// `IBV_ACCESS_MW_BIND`; local only: not carried in descriptors).
        const MW_BIND = 1 << 8;
        /// Target of remote atomics (compare-and-swap, fetch-and-add)
        /// issued by the remote side (rpma extension,
        /// `IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE`). librpma's
        /// usage byte has no bit left for it: descriptors carry it in rpma's
        /// extension, see [`MrLocal::descriptor_ext`](crate::MrLocal::descriptor_ext).
        const REMOTE_ATOMIC = 1 << 9;
    }
}

impl Usage {
    /// librpma's eight `RPMA_MR_USAGE_*` flags: the bits of a descriptor's
    /// usage byte.
    pub const LIBRPMA: Usage = Usage::from_bits_truncate(0xff);
}

bitflags! {
    /// `IBV_ACCESS_*` flags, as passed to `ibv_reg_mr`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`.
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`.
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ`.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC`.
        const REMOTE_ATOMIC = 1 << 3;
        /// `IBV_ACCESS_MW_BIND`.
        const MW_BIND = 1 << 4;
        /// `IBV_ACCESS_ZERO_BASED`.
        const ZERO_BASED = 1 << 5;
        /// `IBV_ACCESS_ON_DEMAND`.
        const ON_DEMAND = 1 << 6;
        /// `IBV_ACCESS_HUGETLB`.
        const HUGETLB = 1 << 7;
        /// `IBV_ACCESS_FLUSH_GLOBAL`.
        const FLUSH_GLOBAL = 1 << 8;
        /// `IBV_ACCESS_FLUSH_PERSISTENT`.
        const FLUSH_PERSISTENT = 1 << 9;
        /// `IBV_ACCESS_RELAXED_ORDERING`.
        const RELAXED_ORDERING = 1 << 20;
    }
}

/// librpma's usage → access translation (`rpma_peer_usage2access`).
///
/// * `READ_SRC` → `REMOTE_READ`
/// * `FLUSH_TYPE_*` → `REMOTE_READ` (APM flush is an RDMA READ), or with
///   `native_flush` `FLUSH_GLOBAL` / `FLUSH_PERSISTENT` respectively
/// * `READ_DST` → `LOCAL_WRITE`, plus `REMOTE_WRITE` on iWARP (which carries
///   a READ as a WRITE in the other direction)
/// * `WRITE_SRC` → `LOCAL_WRITE`
/// * `WRITE_DST` → `REMOTE_WRITE | LOCAL_WRITE`
/// * `RECV` → `LOCAL_WRITE`
/// * `SEND` → nothing (a send-only region has access 0)
/// * `MW_BIND` (rpma) → `MW_BIND`
/// * `REMOTE_ATOMIC` (rpma) → `REMOTE_ATOMIC | LOCAL_WRITE` (ibv_reg_mr(3)
///   requires local write with remote atomic access)
///
/// ```
/// use rpma::{mr::usage_to_access, Access, Usage};
/// assert_eq!(usage_to_access(Usage::WRITE_DST, false, false), Access::REMOTE_WRITE | Access::LOCAL_WRITE);
/// assert_eq!(usage_to_access(Usage::READ_DST, true, false), Access::LOCAL_WRITE | Access::REMOTE_WRITE);
/// assert_eq!(usage_to_access(Usage::FLUSH_TYPE_PERSISTENT, false, true), Access::FLUSH_PERSISTENT);
/// assert_eq!(usage_to_access(Usage::SEND, false, false), Access::empty());
/// assert_eq!(usage_to_access(Usage::REMOTE_ATOMIC, false, false), Access::REMOTE_ATOMIC | Access::LOCAL_WRITE);
/// ```
pub fn usage_to_access(usage: Usage, iwarp: bool, native_flush: bool) -> Access {
    let mut a = Access::empty();
    if usage.contains(Usage::READ_SRC) {
        a |= Access::REMOTE_READ;
    }
    let flush = Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT;
    if native_flush {
        if usage.contains(Usage::FLUSH_TYPE_VISIBILITY) {
            a |= Access::FLUSH_GLOBAL;
        }
        if usage.contains(Usage::FLUSH_TYPE_PERSISTENT) {
            a |= Access::FLUSH_PERSISTENT;
        }
    } else if usage.intersects(flush) {
        a |= Access::REMOTE_READ;
    }
    if usage.contains(Usage::READ_DST) {
        a |= Access::LOCAL_WRITE;
        if iwarp {
            a |= Access::REMOTE_WRITE;
        }
    }
    if usage.contains(Usage::WRITE_SRC) {
        a |= Access::LOCAL_WRITE;
    }
    if usage.contains(Usage::WRITE_DST) {
        a |= Access::REMOTE_WRITE | Access::LOCAL_WRITE;
    }
    if usage.contains(Usage::RECV) {
        a |= Access::LOCAL_WRITE;
    }
    if usage.contains(Usage::MW_BIND) {
        a |= Access::MW_BIND;
    }
    if usage.contains(Usage::REMOTE_ATOMIC) {
        a |= Access::REMOTE_ATOMIC | Access::LOCAL_WRITE;
    }
    a
}

/// [`usage_to_access`] for one device, as two lookups: a peer's
/// registrations translate with it. The translation is an OR of what each
/// usage bit asks for, so the table of the five low bits ORed with the
/// table of the five high bits gives the same answer for every usage (the
/// exhaustive test below checks it); both are filled from
/// [`usage_to_access`], which stays the one definition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccessTable {
    lo: [Access; 32],
    hi: [Access; 32],
}

impl AccessTable {
    /// The table of a device (`iwarp`, `native_flush` as in [`usage_to_access`]).
    pub(crate) fn new(iwarp: bool, native_flush: bool) -> AccessTable {
        let at = |bits: u16| usage_to_access(Usage::from_bits_truncate(bits), iwarp, native_flush);
        AccessTable { lo: std::array::from_fn(|i| at(i as u16)), hi: std::array::from_fn(|i| at((i as u16) << 5)) }
    }

    /// `usage_to_access(usage, iwarp, native_flush)`.
    #[inline]
    pub(crate) fn get(&self, usage: Usage) -> Access {
        // The two tables cover the ten usage bits; a flag above bit 9 would
        // need a third (this stops the build until it has one).
        const _: () = assert!(Usage::all().bits() >> 10 == 0);
        let b = usage.bits() as usize;
        self.lo[b & 31] | self.hi[(b >> 5) & 31]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librpma's table (`tests/unit/peer/peer-mr_reg.c`), each flag alone,
    /// without native flush: (usage, IB access, iWARP access).
    #[test]
    fn usage_table_single_flags() {
        let lw = Access::LOCAL_WRITE;
        let rw = Access::REMOTE_WRITE;
        let rr = Access::REMOTE_READ;
        let table = [
            (Usage::READ_SRC, rr, rr),
            (Usage::READ_DST, lw, lw | rw),
            (Usage::WRITE_SRC, lw, lw),
            (Usage::WRITE_DST, rw | lw, rw | lw),
            (Usage::FLUSH_TYPE_VISIBILITY, rr, rr),
            (Usage::FLUSH_TYPE_PERSISTENT, rr, rr),
            (Usage::SEND, Access::empty(), Access::empty()),
            (Usage::RECV, lw, lw),
        ];
        for (u, ib, iwarp) in table {
            assert_eq!(usage_to_access(u, false, false), ib, "{u:?} on IB");
            assert_eq!(usage_to_access(u, true, false), iwarp, "{u:?} on iWARP");
        }
    }

    #[test]
    fn usage_table_native_flush() {
        assert_eq!(usage_to_access(Usage::FLUSH_TYPE_VISIBILITY, false, true), Access::FLUSH_GLOBAL);
        assert_eq!(usage_to_access(Usage::FLUSH_TYPE_PERSISTENT, false, true), Access::FLUSH_PERSISTENT);
        assert_eq!(
            usage_to_access(Usage::FLUSH_TYPE_VISIBILITY | Usage::FLUSH_TYPE_PERSISTENT, false, true),
            Access::FLUSH_GLOBAL | Access::FLUSH_PERSISTENT
        );
        assert_eq!(
            usage_to_access(Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT, false, true),
            Access::REMOTE_READ | Access::FLUSH_PERSISTENT
        );
        // Everything else is unaffected by native flush.
        for u in [Usage::READ_SRC, Usage::READ_DST, Usage::WRITE_SRC, Usage::WRITE_DST, Usage::SEND, Usage::RECV] {
            assert_eq!(usage_to_access(u, false, true), usage_to_access(u, false, false));
        }
    }

    #[test]
    fn usage_table_combinations() {
        let librpma_all = Usage::LIBRPMA;
        assert_eq!(
            usage_to_access(librpma_all, false, false),
            Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
        );
        assert_eq!(
            usage_to_access(Usage::MW_BIND | Usage::READ_SRC, false, false),
            Access::MW_BIND | Access::REMOTE_READ
        );
        assert_eq!(usage_to_access(Usage::READ_SRC | Usage::FLUSH_TYPE_PERSISTENT, false, false), Access::REMOTE_READ);
        assert_eq!(usage_to_access(Usage::SEND | Usage::RECV, false, false), Access::LOCAL_WRITE);
        assert_eq!(
            usage_to_access(Usage::READ_SRC | Usage::WRITE_DST, false, false),
            Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
        );
        assert_eq!((Usage::all() - Usage::MW_BIND - Usage::REMOTE_ATOMIC).bits(), 0xff, "librpma's 8 flags, same bits");
        assert_eq!(Usage::LIBRPMA, Usage::all() - Usage::MW_BIND - Usage::REMOTE_ATOMIC);
        assert_eq!(
            usage_to_access(Usage::REMOTE_ATOMIC | Usage::READ_SRC, false, true),
            Access::REMOTE_ATOMIC | Access::LOCAL_WRITE | Access::REMOTE_READ
        );
    }

    /// The two-lookup table answers as the translation itself, for every
    /// usage (the ten bits) on every kind of device.
    #[test]
    fn access_table_matches_the_translation() {
        for (iwarp, native_flush) in [(false, false), (true, false), (false, true), (true, true)] {
            let t = AccessTable::new(iwarp, native_flush);
            for bits in 0..=Usage::all().bits() {
                let u = Usage::from_bits_truncate(bits);
                assert_eq!(
                    t.get(u),
                    usage_to_access(u, iwarp, native_flush),
                    "{u:?} iwarp {iwarp} flush {native_flush}"
                );
            }
        }
    }
}
