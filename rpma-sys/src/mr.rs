//! Memory region.

use crate::ffi;
use crate::pd::Pd;
use crate::{from_errno_ret, last_error};
use std::io;
use std::os::raw::c_int;

/// How `ibv_rereg_mr` failed (`enum ibv_rereg_mr_err_code`), which says what
/// state the region is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReregClass {
    /// `IBV_REREG_MR_ERR_INPUT`: the old region is valid (input rejected by libibverbs).
    Input,
    /// `IBV_REREG_MR_ERR_DONT_FORK_NEW`: the old region is valid.
    DontForkNew,
    /// `IBV_REREG_MR_ERR_DO_FORK_OLD`: the new region is valid.
    DoForkOld,
    /// `IBV_REREG_MR_ERR_CMD`: the region must not be used.
    Cmd,
    /// `IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW`: the region must not be used.
    CmdAndDoForkNew,
    /// Any other negative return.
    Other(i32),
}

/// A failed `ibv_rereg_mr`: its class and errno.
#[derive(Debug)]
pub struct ReregFailure {
    /// The error class.
    pub class: ReregClass,
    /// The errno.
    pub error: io::Error,
}

/// A registered memory region (`ibv_reg_mr`), deregistered on drop.
///
/// The handle does not own the memory it covers: whoever registers it must keep
/// the memory valid, and unmoved, until the region is dropped (see
/// [`Mr::reg`]'s safety contract).
pub struct Mr {
    mr: *mut ffi::ibv_mr,
    pd: Pd,
    access: u32,
    iova: Option<u64>,
    /// [`device_addr`](Mr::device_addr) and [`lkey`](Mr::lkey), read
    /// once after each (re)registration: the data path reads them per
    /// operation.
    dev_addr: u64,
    lkey: u32,
}

// SAFETY: ibv_mr is usable from any thread; it is only destroyed by Drop/dereg.
unsafe impl Send for Mr {}
// SAFETY: the accessors only read fields the provider never changes after
// registration; verbs taking an MR are thread-safe.
unsafe impl Sync for Mr {}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.addr())
            .field("length", &self.length())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &format_args!("{:#x}", self.access))
            .finish()
    }
}

impl Mr {
    /// Registers `len` bytes at `addr` with the `IBV_ACCESS_*` bits `access`.
    ///
    /// # Safety
    /// `addr..addr+len` must be memory of this process that stays allocated,
    /// at the same address, until the returned `Mr` is deregistered
    /// successfully ([`Mr::dereg`] returns `Ok`); if deregistration fails,
    /// for ever (leak it). While remote or local access flags allow it, the
    /// device may read or write it at any time in that span.
    ///
    /// # Errors
    /// The errno of `ibv_reg_mr` (`EINVAL`, `ENOMEM`, `EOPNOTSUPP`, `EFAULT`...).
    #[inline]
    pub unsafe fn reg(pd: &Pd, addr: *mut u8, len: usize, access: u32) -> io::Result<Mr> {
        // SAFETY: live PD; the caller guarantees the memory range.
        let mr = unsafe { ffi::ibv_reg_mr(pd.as_ptr(), addr.cast(), len, access as c_int) };
        Self::wrap(mr, pd, access, None, "ibv_reg_mr")
    }

    /// Registers memory as [`Mr::reg`] does, but the device addresses it by
    /// `iova` instead of its virtual address (`ibv_reg_mr_iova`). The kernel
    /// requires `iova` to have the same offset within a page as `addr`
    /// (`EINVAL` otherwise).
    ///
    /// # Safety
    /// As for [`Mr::reg`].
    ///
    /// # Errors
    /// The errno of `ibv_reg_mr_iova`.
    pub unsafe fn reg_iova(pd: &Pd, addr: *mut u8, len: usize, iova: u64, access: u32) -> io::Result<Mr> {
        // SAFETY: live PD; the caller guarantees the memory range.
        let mr = unsafe { ffi::ibv_reg_mr_iova(pd.as_ptr(), addr.cast(), len, iova, access as c_int) };
        Self::wrap(mr, pd, access, Some(iova), "ibv_reg_mr_iova")
    }

    #[inline]
    fn wrap(mr: *mut ffi::ibv_mr, pd: &Pd, access: u32, iova: Option<u64>, op: &str) -> io::Result<Mr> {
        if mr.is_null() {
            return Err(last_error(op));
        }
        let mut me = Mr { mr, pd: pd.clone(), access, iova, dev_addr: 0, lkey: 0 };
        me.refresh();
        Ok(me)
    }

    /// Reads the device address and lkey again (after `ibv_reg_mr` or
    /// `ibv_rereg_mr`, which update the `ibv_mr` in place).
    fn refresh(&mut self) {
        // SAFETY: live MR (freed only by Drop/dereg).
        let (addr, lkey) = unsafe { ((*self.mr).addr as u64, (*self.mr).lkey) };
        self.dev_addr = self.iova.unwrap_or(addr);
        self.lkey = lkey;
    }

    /// Re-registers the region (`ibv_rereg_mr`): a new protection domain,
    /// new memory (`addr`, `len`) and/or new access bits, as given.
    ///
    /// # Safety
    /// With new memory, [`Mr::reg`]'s contract applies to it; the old memory
    /// may be released once this returns `Ok` (or fails with
    /// [`ReregClass::DoForkOld`]).
    ///
    /// # Errors
    /// The failure class and errno; see [`ReregClass`] for the region's state.
    pub unsafe fn rereg(
        &mut self,
        pd: Option<&Pd>,
        memory: Option<(*mut u8, usize)>,
        access: Option<u32>,
    ) -> Result<(), ReregFailure> {
        let mut flags = 0;
        if pd.is_some() {
            flags |= ffi::ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_PD.0 as i32;
        }
        if memory.is_some() {
            flags |= ffi::ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_TRANSLATION.0 as i32;
        }
        if access.is_some() {
            flags |= ffi::ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_ACCESS.0 as i32;
        }
        let (addr, len) = memory.unwrap_or((std::ptr::null_mut(), 0));
        let pd_ptr = pd.map_or(std::ptr::null_mut(), |p| p.as_ptr());
        // SAFETY: live MR and PD; libibverbs wants access 0 unless it changes.
        let rc = unsafe { ffi::ibv_rereg_mr(self.mr, flags, pd_ptr, addr.cast(), len, access.unwrap_or(0) as i32) };
        let update = |me: &mut Mr| {
            if let Some(p) = pd {
                me.pd = p.clone();
            }
            if let Some(a) = access {
                me.access = a;
            }
            if memory.is_some() {
                me.iova = None;
            }
            me.refresh();
        };
        if rc == 0 {
            update(self);
            return Ok(());
        }
        let error = last_error("ibv_rereg_mr");
        use ffi::ibv_rereg_mr_err_code as c;
        let class = match rc {
            x if x == c::IBV_REREG_MR_ERR_INPUT => ReregClass::Input,
            x if x == c::IBV_REREG_MR_ERR_DONT_FORK_NEW => ReregClass::DontForkNew,
            x if x == c::IBV_REREG_MR_ERR_DO_FORK_OLD => ReregClass::DoForkOld,
            x if x == c::IBV_REREG_MR_ERR_CMD => ReregClass::Cmd,
            x if x == c::IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW => ReregClass::CmdAndDoForkNew,
            x => ReregClass::Other(x),
        };
        if class == ReregClass::DoForkOld {
            update(self);
        }
        // Whatever happened, the ibv_mr says what the device uses now.
        self.refresh();
        Err(ReregFailure { class, error })
    }

    /// The protection domain the region belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// The access bits it was registered with.
    pub fn access(&self) -> u32 {
        self.access
    }

    /// Start of the region as the device addresses it: the iova of
    /// [`Mr::reg_iova`], else the process address.
    #[inline]
    pub fn device_addr(&self) -> u64 {
        self.dev_addr
    }

    /// Start of the region in this process (`ibv_mr.addr`; libibverbs keeps
    /// the process address here even for [`Mr::reg_iova`]).
    pub fn addr(&self) -> u64 {
        // SAFETY: live MR.
        unsafe { (*self.mr).addr as u64 }
    }

    /// Length in bytes (`ibv_mr.length`).
    pub fn length(&self) -> usize {
        // SAFETY: live MR.
        unsafe { (*self.mr).length }
    }

    /// Local key.
    #[inline]
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.mr).rkey }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::ibv_mr {
        self.mr
    }

    /// `ibv_advise_mr` over `len` bytes starting `offset` bytes into the region.
    /// `addr` is the local virtual address of the region's start.
    ///
    /// # Errors
    /// The errno of `ibv_advise_mr` (`EOPNOTSUPP` when the provider lacks it,
    /// `EINVAL`/`EFAULT` for a bad range or advice).
    pub fn advise(&self, local_addr: u64, offset: u64, len: u32, advice: u32, flags: u32) -> io::Result<()> {
        let mut sge = ffi::ibv_sge { addr: local_addr.wrapping_add(offset), length: len, lkey: self.lkey() };
        // SAFETY: live PD and a valid one-element SGE list; the provider
        // validates the range against the MR.
        let rc = unsafe { ffi::ibv_advise_mr(self.pd.as_ptr(), advice, flags, &mut sge, 1) };
        from_errno_ret(rc, "ibv_advise_mr")
    }

    /// [`dereg`](Mr::dereg) where the handle lies, for an owner that keeps
    /// it in place (in a `ManuallyDrop`): no copy of the handle goes out and
    /// back. On failure the region is untouched and still registered.
    ///
    /// # Safety
    /// After `Ok`, the region is deregistered and its protection domain
    /// reference released: the handle must never be used, dropped or
    /// deregistered again (forget it, or free its storage without dropping
    /// it).
    ///
    /// # Errors
    /// The errno of `ibv_dereg_mr`.
    #[inline(always)]
    pub unsafe fn dereg_in_place(&mut self) -> io::Result<()> {
        if crate::fault::take(crate::fault::Teardown::DeregMr) {
            return Err(crate::fault::injected("ibv_dereg_mr"));
        }
        // SAFETY: live MR; the caller never touches it again after Ok.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr) };
        from_errno_ret(rc, "ibv_dereg_mr")?;
        // SAFETY: the PD reference is dropped once, here; the caller's
        // contract keeps Drop (which would drop it again) from running.
        unsafe { std::ptr::drop_in_place(&mut self.pd) };
        Ok(())
    }

    /// Deregisters now, reporting failure; on failure the region is handed
    /// back still registered (e.g. `EBUSY` while a memory window is bound).
    ///
    /// # Errors
    /// The errno of `ibv_dereg_mr`, with the untouched region.
    #[inline(always)]
    pub fn dereg(self) -> Result<(), (Mr, io::Error)> {
        if crate::fault::take(crate::fault::Teardown::DeregMr) {
            return Err((self, crate::fault::injected("ibv_dereg_mr")));
        }
        // SAFETY: live MR, deregistered at most once (Drop is skipped on success).
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr) };
        match from_errno_ret(rc, "ibv_dereg_mr") {
            Ok(()) => {
                crate::drop_parent_only(self, |m| &m.pd);
                Ok(())
            }
            Err(e) => Err((self, e)),
        }
    }
}

/// Dropping deregisters and can only log a failure, after which the device
/// may still reach the memory: owners of the memory call [`Mr::dereg`] and
/// keep (leak) the memory when it fails, as `rpma` does.
impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: live MR, deregistered once.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr) };
        if let Err(e) = from_errno_ret(rc, "ibv_dereg_mr") {
            crate::log_hook::sys_log!(Error, "ibv_dereg_mr: {e}; the memory it covers must not be freed");
        }
    }
}
