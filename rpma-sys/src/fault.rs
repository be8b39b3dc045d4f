//! Teardown failures on demand, for tests (cargo feature `fault-injection`).
//!
//! A verbs destroy, deregister or deallocate call can fail, and then the
//! device may still reach the memory the object covers. Tests prove that the
//! layers above leak such memory instead of freeing it by arming a failure
//! here: the next call of that kind on this thread fails with `EBUSY`
//! without calling the verb, so the object really stays alive, as after a
//! real failure. Without the feature nothing can be armed and the check
//! compiles to `false`.

use std::io;

/// A teardown verb whose failure can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teardown {
    /// `ibv_dereg_mr`.
    DeregMr,
    /// `ibv_dealloc_mw`.
    DeallocMw,
    /// `ibv_destroy_qp` (also for a QP made on a CM ID).
    DestroyQp,
    /// `ibv_destroy_srq`.
    DestroySrq,
}

#[cfg(feature = "fault-injection")]
thread_local! {
    /// Armed failures per kind, indexed by `Teardown as usize`.
    static ARMED: std::cell::Cell<[u8; 4]> = const { std::cell::Cell::new([0; 4]) };
}

/// Makes the next `t` on this thread fail with `EBUSY`; called twice, the
/// next two (feature `fault-injection` only).
#[cfg(feature = "fault-injection")]
pub fn fail_next(t: Teardown) {
    ARMED.with(|a| {
        let mut v = a.get();
        v[t as usize] = v[t as usize].saturating_add(1);
        a.set(v);
    });
}

/// Whether a failure of `t` is armed on this thread; uses it up.
#[inline]
pub(crate) fn take(t: Teardown) -> bool {
    #[cfg(feature = "fault-injection")]
    {
        ARMED.with(|a| {
            let mut v = a.get();
            let armed = v[t as usize] > 0;
            if armed {
                v[t as usize] -= 1;
                a.set(v);
            }
            armed
        })
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = t;
        false
    }
}

/// The error an injected failure reports (`EBUSY`), logged as injected.
pub(crate) fn injected(op: &str) -> io::Error {
    crate::log_hook::sys_log!(Warn, "{op}: injected failure (fault-injection)");
    io::Error::from_raw_os_error(libc::EBUSY)
}

/// The real number of the QP renamed by `reuse_qp_num` (high half) and the
/// number it reports (low half); 0: none. Process-wide, since completions
/// are polled on any thread.
#[cfg(feature = "fault-injection")]
static RENAMED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The number the next QP created reports; 0: none armed.
#[cfg(feature = "fault-injection")]
static RENAME_NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Makes the next QP created (on any thread) report the number `n`, from
/// `Qp::qp_num` and (through [`qp_num`]) in the shared CQ's routing of its
/// completions, as a device that reuses QP numbers would (feature
/// `fault-injection` only). It lasts until the
/// next `reuse_qp_num` call; `n == 0` disarms and ends the renaming.
#[cfg(feature = "fault-injection")]
pub fn reuse_qp_num(n: u32) {
    RENAME_NEXT.store(n, std::sync::atomic::Ordering::SeqCst);
    if n == 0 {
        RENAMED.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A QP numbered `real` was created: applies an armed `reuse_qp_num`.
#[inline]
pub(crate) fn qp_created(real: u32) {
    #[cfg(feature = "fault-injection")]
    {
        use std::sync::atomic::Ordering::SeqCst;
        let n = RENAME_NEXT.swap(0, SeqCst);
        if n != 0 {
            crate::log_hook::sys_log!(Warn, "QP {real} reports number {n} (fault-injection)");
            RENAMED.store(u64::from(real) << 32 | u64::from(n), SeqCst);
        }
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = real;
}

/// The number QP `real` reports (itself unless renamed by
/// `reuse_qp_num`). `Qp::qp_num` applies it; a completion's raw
/// `qp_num` does not (the plain data path stays free of the check), so the
/// shared CQ's routing applies it where it matches completions to QPs.
#[inline(always)]
pub fn qp_num(real: u32) -> u32 {
    #[cfg(feature = "fault-injection")]
    {
        let r = RENAMED.load(std::sync::atomic::Ordering::Relaxed);
        if r != 0 && (r >> 32) as u32 == real {
            return r as u32;
        }
    }
    real
}
