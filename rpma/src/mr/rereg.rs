//! Re-registration of a live region (`ibv_rereg_mr`), with an emulation
//! where the provider lacks it.

use crate::error::{Error, Misuse, Result};
use crate::logging::{rpma_log, LogLevel};
use crate::memory::RegMemory;
use crate::mr::{check_usage, register, Access, MrLocal, MrParts, Usage};
use crate::peer::Peer;
use rpma_sys::mr::ReregClass;

/// How a re-registration was carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReregHow {
    /// By the provider (`ibv_rereg_mr`).
    Native,
    /// By registering anew and then deregistering the old registration,
    /// because the provider does not implement `ibv_rereg_mr` (rxe).
    Emulated,
    /// Nothing changed at the verbs level (the new usage maps to the same
    /// access flags): only the usage was updated.
    UsageOnly,
}

/// A successful re-registration.
#[derive(Debug)]
#[non_exhaustive]
pub struct Reregistered<M: RegMemory> {
    /// The region, registered as asked.
    pub mr: MrLocal<M>,
    /// How.
    pub how: ReregHow,
    /// Whether the lkey or rkey changed: descriptors given out before refer
    /// to the old registration.
    pub keys_changed: bool,
}

/// A failed re-registration. The two cases say what became of the region.
///
/// ```no_run
/// use rpma::mr::rereg::ReregError;
/// # #[allow(dead_code)]
/// # fn f(mr: rpma::MrLocal<Vec<u8>>, other: &rpma::Peer) {
/// match mr.rereg(Some(other), None) {
///     Ok(r) => println!("now on the other peer ({:?})", r.how),
///     Err(ReregError::Unchanged { mr, error, .. }) => println!("still usable: {mr:?} ({error})"),
///     Err(ReregError::Lost { memory, error, .. }) => println!("{} bytes back, unregistered: {error}", memory.len()),
///     Err(e @ ReregError::Leaked { .. }) => println!("{e}"),
/// }
/// # }
/// ```
#[derive(Debug)]
pub enum ReregError<M: RegMemory, N = M> {
    /// The region is unchanged and usable (invalid input, operations in
    /// flight, libibverbs' INPUT / DONT_FORK_NEW classes, a failed
    /// emulation). New memory, if any was given, comes back too.
    Unchanged {
        /// The region, as before.
        mr: MrLocal<M>,
        /// The new memory that was not registered.
        new_memory: Option<N>,
        /// Why.
        error: Error,
    },
    /// The registration could not be released after a failure (its
    /// `ibv_dereg_mr` failed too), so the device may still reach the
    /// memory: rpma leaked the memory (old and new) instead of handing it
    /// back or freeing it, and logged it.
    Leaked {
        /// Why the re-registration failed.
        error: Error,
        /// Why the registration could not be released.
        dereg_error: Error,
    },
    /// The provider failed in a way that leaves the registration unusable
    /// (the CMD classes): rpma deregistered it, as the man page requires,
    /// and hands the memory back.
    Lost {
        /// The region's memory, no longer registered.
        memory: M,
        /// The new memory that was not registered.
        new_memory: Option<N>,
        /// Why.
        error: Error,
    },
}

impl<M: RegMemory, N> ReregError<M, N> {
    /// The error, whichever the case: for code that reports the failure
    /// before deciding what to do with the region the variant gives back.
    pub fn error(&self) -> &Error {
        match self {
            ReregError::Unchanged { error, .. } | ReregError::Lost { error, .. } | ReregError::Leaked { error, .. } => {
                error
            }
        }
    }
}

impl<M: RegMemory, N> std::fmt::Display for ReregError<M, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // The re-registration's error is the source, not repeated here.
            ReregError::Unchanged { .. } => f.write_str("re-registration failed, the region is unchanged"),
            ReregError::Lost { .. } => f.write_str("re-registration failed and the region was deregistered"),
            ReregError::Leaked { dereg_error, .. } => write!(
                f,
                "re-registration failed and the registration could not be released ({dereg_error}): the memory \
                 is leaked"
            ),
        }
    }
}

impl<M: RegMemory + std::fmt::Debug, N: std::fmt::Debug> std::error::Error for ReregError<M, N> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error())
    }
}

impl<M: RegMemory> MrLocal<M> {
    /// Changes the protection domain (`peer`) and/or the usage of a live
    /// region (`ibv_rereg_mr` with `CHANGE_PD` / `CHANGE_ACCESS`), keeping its
    /// memory. Where the provider does not implement re-registration
    /// (measured: rxe on Linux 6.1 answers `EOPNOTSUPP`), it is emulated by
    /// registering anew, then deregistering the old registration; either way
    /// the result says how, and whether the keys changed.
    ///
    /// ```no_run
    /// # #[allow(dead_code)]
    /// # fn f(mr: rpma::MrLocal<rpma::AlignedBuf>) {
    /// use rpma::mr::rereg::ReregError;
    /// match mr.rereg(None, Some(rpma::Usage::READ_SRC | rpma::Usage::WRITE_DST)) {
    ///     Ok(r) => println!("{:?}, rkey now {:#x}", r.how, r.mr.rkey()),
    ///     Err(ReregError::Unchanged { mr, error, .. }) => println!("kept {mr:?}: {error}"),
    ///     Err(ReregError::Lost { error, .. }) => println!("registration lost: {error}"),
    ///     Err(e @ ReregError::Leaked { .. }) => println!("{e}"),
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ReregError::Unchanged`] with [`Error::Inval`] when nothing is to
    /// change, the usage is invalid, or the new peer is on another device;
    /// [`Error::Again`] while operations using the region are in flight;
    /// [`Error::Provider`] for the INPUT / DONT_FORK_NEW classes or a failed
    /// emulation, including an old registration that could not be
    /// deregistered after the new one was made (the new one is dropped).
    /// [`ReregError::Lost`] with [`Error::Provider`] for the CMD classes.
    /// [`ReregError::Leaked`] when a registration that had to go could not
    /// be deregistered: the memory is leaked, never freed.
    pub fn rereg(
        self,
        peer: Option<&Peer>,
        usage: Option<Usage>,
    ) -> std::result::Result<Reregistered<M>, ReregError<M>> {
        if peer.is_none() && usage.is_none() {
            return Err(unchanged(
                self,
                None,
                Error::misuse(Misuse::NothingToChange, "rereg: nothing to change (give a peer and/or a usage)"),
            ));
        }
        let plan = match Plan::new(&self, peer, usage) {
            Ok(p) => p,
            Err(e) => return Err(unchanged(self, None, e)),
        };
        let inner = match self.into_parts("rereg") {
            Ok(i) => i,
            Err((mr, e)) => return Err(unchanged(mr, None, e)),
        };
        let MrParts { mr: sys, peer: old_peer, usage: old_usage, ptr, len, odp, mem } = inner;
        if !plan.pd_change && !plan.access_change {
            let mr = MrLocal::from_parts(MrParts { mr: sys, peer: plan.peer, usage: plan.usage, ptr, len, odp, mem });
            return Ok(Reregistered { mr, how: ReregHow::UsageOnly, keys_changed: false });
        }
        match plan.run(sys, odp, None, (ptr, len)) {
            Step::Done { sys, how, odp, keys_changed } => {
                let mr =
                    MrLocal::from_parts(MrParts { mr: sys, peer: plan.peer, usage: plan.usage, ptr, len, odp, mem });
                Ok(Reregistered { mr, how, keys_changed })
            }
            Step::Unchanged(sys, error) => {
                let mr = MrLocal::from_parts(MrParts { mr: sys, peer: old_peer, usage: old_usage, ptr, len, odp, mem });
                Err(ReregError::Unchanged { mr, new_memory: None, error })
            }
            Step::Lost(error) => Err(ReregError::Lost { memory: mem, new_memory: None, error }),
            Step::Leaked { error, dereg_error } => {
                std::mem::forget(mem);
                Err(ReregError::Leaked { error, dereg_error })
            }
        }
    }

    /// Moves a live region to new memory `mem` (`CHANGE_TRANSLATION`), and
    /// optionally to another peer and usage, as [`rereg`](Self::rereg) does;
    /// returns the region over `mem` and the old memory, no longer
    /// registered.
    ///
    /// # Errors
    /// As [`rereg`](Self::rereg); [`Error::Inval`] for empty new memory.
    #[allow(clippy::type_complexity)]
    pub fn rereg_memory<N: RegMemory>(
        self,
        mut mem: N,
        peer: Option<&Peer>,
        usage: Option<Usage>,
    ) -> std::result::Result<(Reregistered<N>, M), ReregError<M, N>> {
        let (nptr, nlen) = mem.as_mut_ptr_len();
        if nlen == 0 {
            return Err(unchanged(
                self,
                Some(mem),
                Error::empty(crate::error::Arg::Memory, "rereg_memory: the new memory is 0 bytes long"),
            ));
        }
        let plan = match Plan::new(&self, peer, usage) {
            Ok(p) => p,
            Err(e) => return Err(unchanged(self, Some(mem), e)),
        };
        // Checked before the native call, which would otherwise refuse it
        // only after the registration was changed (and lose the region).
        if let Err(e) = crate::mr::check_len(&plan.peer, nlen) {
            return Err(unchanged(self, Some(mem), e));
        }
        let inner = match self.into_parts("rereg_memory") {
            Ok(i) => i,
            Err((mr, e)) => return Err(unchanged(mr, Some(mem), e)),
        };
        let MrParts { mr: sys, peer: old_peer, usage: old_usage, ptr, len, odp, mem: old_mem } = inner;
        match plan.run(sys, odp, Some((nptr, nlen)), (nptr, nlen)) {
            Step::Done { sys, how, odp, keys_changed } => {
                let mr = MrLocal::from_parts(MrParts {
                    mr: sys,
                    peer: plan.peer,
                    usage: plan.usage,
                    ptr: nptr,
                    len: nlen,
                    odp,
                    mem,
                });
                Ok((Reregistered { mr, how, keys_changed }, old_mem))
            }
            Step::Unchanged(sys, error) => {
                let mr = MrLocal::from_parts(MrParts {
                    mr: sys,
                    peer: old_peer,
                    usage: old_usage,
                    ptr,
                    len,
                    odp,
                    mem: old_mem,
                });
                Err(ReregError::Unchanged { mr, new_memory: Some(mem), error })
            }
            Step::Lost(error) => Err(ReregError::Lost { memory: old_mem, new_memory: Some(mem), error }),
            Step::Leaked { error, dereg_error } => {
                std::mem::forget(old_mem);
                std::mem::forget(mem);
                Err(ReregError::Leaked { error, dereg_error })
            }
        }
    }
}

fn unchanged<M: RegMemory, N>(mr: MrLocal<M>, new_memory: Option<N>, error: Error) -> ReregError<M, N> {
    ReregError::Unchanged { mr, new_memory, error }
}

/// What a re-registration changes, validated before anything is touched.
struct Plan {
    peer: Peer,
    usage: Usage,
    access: u32,
    pd_change: bool,
    access_change: bool,
}

/// The outcome for the registration handle.
enum Step {
    Done {
        sys: rpma_sys::mr::Mr,
        how: ReregHow,
        odp: bool,
        keys_changed: bool,
    },
    Unchanged(rpma_sys::mr::Mr, Error),
    Lost(Error),
    /// A registration could not be deregistered: leak all memory involved.
    Leaked {
        error: Error,
        dereg_error: Error,
    },
}

/// Whether a region registered with `current` access changes when asked
/// for `wanted` (from its usage): `ON_DEMAND` comes from the ODP fallback,
/// not from the usage, so it is not a change.
fn access_changes(current: u32, wanted: u32) -> bool {
    wanted != current & !Access::ON_DEMAND.bits()
}

/// The access a native re-registration asks for: a region registered
/// through the ODP fallback stays on demand.
fn native_access(wanted: u32, odp: bool) -> u32 {
    if odp {
        wanted | Access::ON_DEMAND.bits()
    } else {
        wanted
    }
}

/// Deregisters `sys`; on failure leaks it (the device may still reach its
/// memory) and returns the error.
fn dereg_or_leak(sys: rpma_sys::mr::Mr) -> Result<()> {
    sys.dereg().map_err(|(sys, e)| {
        rpma_log!(LogLevel::Error, "ibv_dereg_mr: {e}; leaking the registration and its memory");
        std::mem::forget(sys);
        Error::provider_raw("ibv_dereg_mr", e)
    })
}

impl Plan {
    fn new<M: RegMemory>(mr: &MrLocal<M>, peer: Option<&Peer>, usage: Option<Usage>) -> Result<Plan> {
        let usage = usage.unwrap_or(mr.usage());
        check_usage(usage)?;
        let peer = peer.cloned().unwrap_or_else(|| mr.peer().clone());
        if !peer.context().0.same_as(&mr.peer().context().0) {
            return Err(Error::inval("rereg: the new peer is on another device than the region"));
        }
        let access = peer.usage_to_access(usage).bits();
        let pd_change = !peer.same_pd(mr.peer());
        let access_change = access_changes(mr.sys().access(), access);
        Ok(Plan { peer, usage, access, pd_change, access_change })
    }

    /// Re-registers natively, or emulates where the provider lacks it.
    /// `translation` is new memory for the native call; `reg` is what an
    /// emulation registers (the new memory, or the region's own).
    fn run(
        &self,
        mut sys: rpma_sys::mr::Mr,
        odp: bool,
        translation: Option<(*mut u8, usize)>,
        reg: (*mut u8, usize),
    ) -> Step {
        let keys = (sys.lkey(), sys.rkey());
        if !self.peer.native_rereg_missing() {
            let access = native_access(self.access, odp);
            // SAFETY: new memory, if any, is owned by the caller's new
            // region for the registration's life; old memory is released
            // only after success.
            let r = unsafe {
                sys.rereg(self.pd_change.then(|| self.peer.pd()), translation, self.access_change.then_some(access))
            };
            let done = |sys: rpma_sys::mr::Mr| {
                let keys_changed = (sys.lkey(), sys.rkey()) != keys;
                Step::Done { sys, how: ReregHow::Native, odp, keys_changed }
            };
            match r {
                Ok(()) => return done(sys),
                Err(f) => {
                    let errno = f.error.raw_os_error();
                    let e = Error::provider_raw(format!("ibv_rereg_mr ({:?})", f.class), f.error);
                    match f.class {
                        ReregClass::Input | ReregClass::DontForkNew => return Step::Unchanged(sys, e),
                        ReregClass::DoForkOld => {
                            rpma_log!(LogLevel::Warning, "ibv_rereg_mr: {e}; the new registration is valid");
                            return done(sys);
                        }
                        ReregClass::Cmd | ReregClass::CmdAndDoForkNew if errno == Some(libc::EOPNOTSUPP) => {
                            rpma_log!(LogLevel::Info, "{}: no native ibv_rereg_mr; emulating", self.peer.device_name());
                            self.peer.set_native_rereg_missing();
                        }
                        _ => {
                            // Unusable: deregister, as the man page requires.
                            return match dereg_or_leak(sys) {
                                Ok(()) => Step::Lost(e),
                                Err(dereg_error) => Step::Leaked { error: e, dereg_error },
                            };
                        }
                    }
                }
            }
        }
        match register(&self.peer, reg.0, reg.1, self.usage, None) {
            Ok((nsys, odp)) => {
                let keys_changed = (nsys.lkey(), nsys.rkey()) != keys;
                // The old registration goes once the new one exists. If it
                // cannot, it stays (still registered, usable) and the new one
                // goes instead; if that fails too, everything is leaked.
                match sys.dereg() {
                    Ok(()) => Step::Done { sys: nsys, how: ReregHow::Emulated, odp, keys_changed },
                    Err((sys, e)) => {
                        let e = Error::provider_raw("ibv_dereg_mr (old registration, emulated rereg)", e);
                        match dereg_or_leak(nsys) {
                            Ok(()) => Step::Unchanged(sys, e),
                            Err(dereg_error) => {
                                std::mem::forget(sys);
                                Step::Leaked { error: e, dereg_error }
                            }
                        }
                    }
                }
            }
            Err(e) => Step::Unchanged(sys, e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ODP region is not "changed" by its own usage, and
    /// a native re-registration keeps it on demand (and reports it so).
    #[test]
    fn odp_regions_keep_on_demand_and_report_no_spurious_change() {
        let rw = (Access::REMOTE_WRITE | Access::LOCAL_WRITE).bits();
        let odp = rw | Access::ON_DEMAND.bits();
        assert!(!access_changes(odp, rw), "the ODP fallback's own bit is not a change");
        assert!(!access_changes(rw, rw));
        assert!(access_changes(odp, Access::REMOTE_READ.bits()));
        assert_eq!(native_access(Access::REMOTE_READ.bits(), true), (Access::REMOTE_READ | Access::ON_DEMAND).bits());
        assert_eq!(native_access(Access::REMOTE_READ.bits(), false), Access::REMOTE_READ.bits());
    }
}
