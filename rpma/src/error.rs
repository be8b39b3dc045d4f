//! The error type: one variant per librpma error code.

use std::borrow::Cow;
use std::io;

mod detail;
pub use detail::{Arg, Detail, Misuse, RangeUse, Wire};

/// A message naming what was wrong (which argument, which bound), and for
/// the common causes a typed [`Detail`] to match instead of the text
/// ([`Error::detail`]). It reads as a `str` (`Deref`) and displays as its
/// text.
#[derive(Clone, PartialEq, Eq)]
pub struct Msg(Box<Repr>);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    Static(&'static str),
    Owned(String),
    Detailed(Detail, String),
}

impl Msg {
    /// A message with a typed detail.
    pub(crate) fn detailed(detail: Detail, text: String) -> Msg {
        Msg(Box::new(Repr::Detailed(detail, text)))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &*self.0 {
            Repr::Static(t) => t,
            Repr::Owned(t) | Repr::Detailed(_, t) => t,
        }
    }

    /// The typed detail, when the cause is a common one.
    pub fn detail(&self) -> Option<&Detail> {
        match &*self.0 {
            Repr::Detailed(d, _) => Some(d),
            _ => None,
        }
    }
}

impl std::ops::Deref for Msg {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.detail() {
            Some(d) => write!(f, "{:?} ({d:?})", self.as_str()),
            None => std::fmt::Debug::fmt(self.as_str(), f),
        }
    }
}

impl From<&'static str> for Msg {
    fn from(s: &'static str) -> Msg {
        Msg(Box::new(Repr::Static(s)))
    }
}

impl From<String> for Msg {
    fn from(s: String) -> Msg {
        Msg(Box::new(Repr::Owned(s)))
    }
}

impl From<Cow<'static, str>> for Msg {
    fn from(s: Cow<'static, str>) -> Msg {
        match s {
            Cow::Borrowed(s) => Msg::from(s),
            Cow::Owned(s) => Msg::from(s),
        }
    }
}

/// Errors of every rpma call. Each variant is one of librpma's `RPMA_E_*`
/// codes ([`Error::code`]) and carries a message saying what was wrong.
///
/// ```
/// use rpma::Error;
/// let e = Error::inval("size is 0; a region must cover at least 1 byte");
/// assert_eq!(e.code(), rpma::error::RPMA_E_INVAL);
/// assert_eq!(rpma::err_2str(e.code()), "Invalid argument");
/// assert!(e.to_string().contains("size is 0"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `RPMA_E_INVAL`: an argument is invalid; the message names it and the
    /// bound it broke.
    #[error("invalid argument: {0}")]
    Inval(Msg),
    /// `RPMA_E_NOSUPP`: the operation is not supported by the device, the
    /// peer or the remote region.
    #[error("not supported: {0}")]
    NoSupp(Msg),
    /// `RPMA_E_PROVIDER`: the verbs provider failed; `source` carries its
    /// errno (and its text: print the error's sources, as `anyhow` and
    /// `std::error::Report` do, or read [`errno`](Error::errno)).
    #[error("provider error: {op} failed")]
    Provider {
        /// The verbs call (or step) that failed.
        op: Msg,
        /// The provider's error, with the errno.
        #[source]
        source: io::Error,
    },
    /// `RPMA_E_NOMEM`: out of memory (host or device resources); `source`
    /// is the provider's `ENOMEM` when a verbs call reported it.
    #[error("out of memory: {what}")]
    NoMem {
        /// What could not be allocated, or the verbs call that failed.
        what: Msg,
        /// The provider's error (`ENOMEM`), when one reported it.
        #[source]
        source: Option<io::Error>,
    },
    /// `RPMA_E_NO_COMPLETION`: a bounded wait for a completion ended
    /// without one (its timeout passed, or its channel is non-blocking
    /// and had no event). A poll that finds nothing is not an error:
    /// [`Cq::get_completion`](crate::Cq::get_completion) returns `None`,
    /// [`Cq::get_wc`](crate::Cq::get_wc) 0 (the C ABI returns this code
    /// for them, as librpma does).
    #[error("no next completion available")]
    NoCompletion,
    /// `RPMA_E_NO_EVENT`: a wait for an event ended without one (its
    /// timeout passed, or the fd is non-blocking and had none).
    #[error("no next event available")]
    NoEvent,
    /// `RPMA_E_AGAIN`: a temporary failure; the call can be retried.
    #[error("temporary error, try again: {0}")]
    Again(Msg),
    /// `RPMA_E_SHARED_CHANNEL`: the completion channel is shared by the
    /// connection's CQs; wait on the connection instead.
    #[error("completion channel is shared: {0}")]
    SharedChannel(Msg),
    /// `RPMA_E_NOT_SHARED_CHNL`: the call needs a shared completion channel.
    #[error("completion channel is not shared: {0}")]
    NotSharedChnl(Msg),
    /// `RPMA_E_UNKNOWN`: an error that fits no other code.
    #[error("unknown error: {0}")]
    Unknown(Msg),
}

/// `RPMA_E_UNKNOWN`.
pub const RPMA_E_UNKNOWN: i32 = -100000;
/// `RPMA_E_NOSUPP`.
pub const RPMA_E_NOSUPP: i32 = -100001;
/// `RPMA_E_PROVIDER`.
pub const RPMA_E_PROVIDER: i32 = -100002;
/// `RPMA_E_NOMEM`.
pub const RPMA_E_NOMEM: i32 = -100003;
/// `RPMA_E_INVAL`.
pub const RPMA_E_INVAL: i32 = -100004;
/// `RPMA_E_NO_COMPLETION`.
pub const RPMA_E_NO_COMPLETION: i32 = -100005;
/// `RPMA_E_NO_EVENT`.
pub const RPMA_E_NO_EVENT: i32 = -100006;
/// `RPMA_E_AGAIN`.
pub const RPMA_E_AGAIN: i32 = -100007;
/// `RPMA_E_SHARED_CHANNEL`.
pub const RPMA_E_SHARED_CHANNEL: i32 = -100008;
/// `RPMA_E_NOT_SHARED_CHNL`.
pub const RPMA_E_NOT_SHARED_CHNL: i32 = -100009;

impl Error {
    /// librpma's numeric code of this error (`RPMA_E_*`, all negative).
    pub fn code(&self) -> i32 {
        match self {
            Error::Inval(_) => RPMA_E_INVAL,
            Error::NoSupp(_) => RPMA_E_NOSUPP,
            Error::Provider { .. } => RPMA_E_PROVIDER,
            Error::NoMem { .. } => RPMA_E_NOMEM,
            Error::NoCompletion => RPMA_E_NO_COMPLETION,
            Error::NoEvent => RPMA_E_NO_EVENT,
            Error::Again(_) => RPMA_E_AGAIN,
            Error::SharedChannel(_) => RPMA_E_SHARED_CHANNEL,
            Error::NotSharedChnl(_) => RPMA_E_NOT_SHARED_CHNL,
            Error::Unknown(_) => RPMA_E_UNKNOWN,
        }
    }

    /// The typed cause, for the common failures ([`Detail`]); `None` for
    /// the others (their message says what happened).
    pub fn detail(&self) -> Option<&Detail> {
        match self {
            Error::Inval(m)
            | Error::NoSupp(m)
            | Error::NoMem { what: m, .. }
            | Error::Again(m)
            | Error::SharedChannel(m)
            | Error::NotSharedChnl(m)
            | Error::Unknown(m) => m.detail(),
            Error::Provider { op, .. } => op.detail(),
            Error::NoCompletion | Error::NoEvent => None,
        }
    }

    /// The provider's errno, for [`Error::Provider`] and an
    /// [`Error::NoMem`] a verbs call reported (`ENOMEM`).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Provider { source, .. } | Error::NoMem { source: Some(source), .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// An [`Error::NoMem`] of the library's own allocation (no provider
    /// error).
    pub(crate) fn nomem(what: impl Into<Msg>) -> Error {
        Error::NoMem { what: what.into(), source: None }
    }

    /// An [`Error::Inval`] with the given message: for code that reports
    /// its own refusals through rpma's error type (a wrapper whose
    /// functions return [`crate::Result`]).
    pub fn inval(msg: impl Into<Msg>) -> Error {
        Error::Inval(msg.into())
    }

    /// An [`Error::NoSupp`] with the given message, as
    /// [`inval`](Error::inval).
    pub fn nosupp(msg: impl Into<Msg>) -> Error {
        Error::NoSupp(msg.into())
    }

    /// An [`Error::NoSupp`] whose detail is [`Detail::Unsupported`].
    pub(crate) fn unsupported(msg: impl Into<String>) -> Error {
        Error::NoSupp(Msg::detailed(Detail::Unsupported, msg.into()))
    }

    /// [`Error::Inval`] with [`Detail::TooLong`].
    #[cold]
    pub(crate) fn too_long(what: Arg, len: u64, max: u64, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::TooLong { what, len, max }, text.into()))
    }

    /// [`Error::Inval`] with [`Detail::OutOfRange`].
    #[cold]
    pub(crate) fn out_of_range(what: Arg, offset: u64, len: u64, size: u64, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::OutOfRange { what, offset, len, size }, text.into()))
    }

    /// [`Error::Inval`] with [`Detail::Closed`].
    #[cold]
    pub(crate) fn closed(text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::Closed, text.into()))
    }

    /// [`Error::Inval`] with [`Detail::Misaligned`].
    #[cold]
    pub(crate) fn misaligned(what: Arg, value: u64, align: u64, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::Misaligned { what, value, align }, text.into()))
    }

    /// [`Error::Inval`] with [`Detail::Empty`].
    #[cold]
    pub(crate) fn empty(what: Arg, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::Empty { what }, text.into()))
    }

    /// [`Error::Inval`] with [`Detail::Foreign`].
    #[cold]
    pub(crate) fn foreign(what: Arg, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::Foreign { what }, text.into()))
    }

    /// [`Error::Inval`] with [`Detail::Misuse`].
    #[cold]
    pub(crate) fn misuse(rule: Misuse, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::Misuse(rule), text.into()))
    }

    /// [`Error::Inval`] with [`Detail::Malformed`].
    #[cold]
    pub(crate) fn malformed(what: Wire, at: usize, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::Malformed { what, at: at as u64 }, text.into()))
    }

    /// [`Error::Again`] with [`Detail::RegionBusy`].
    #[cold]
    pub(crate) fn region_busy(in_flight: u64, windows: u64, text: impl Into<String>) -> Error {
        Error::Again(Msg::detailed(Detail::RegionBusy { in_flight, windows }, text.into()))
    }

    /// [`Error::Again`] with [`Detail::RangeBusy`].
    #[cold]
    pub(crate) fn range_busy(offset: usize, len: usize, by: RangeUse, text: impl Into<String>) -> Error {
        let detail = Detail::RangeBusy { offset: offset as u64, len: len as u64, by };
        Error::Again(Msg::detailed(detail, text.into()))
    }

    /// [`Error::Inval`] with [`Detail::CqFull`].
    #[cold]
    pub(crate) fn cq_full(reserved: u64, size: u64, need: u64, text: impl Into<String>) -> Error {
        Error::Inval(Msg::detailed(Detail::CqFull { reserved, size, need }, text.into()))
    }

    /// Maps a provider failure of `op` as librpma does: `ENOMEM` becomes
    /// [`Error::NoMem`], a failure without errno [`Error::Unknown`], anything
    /// else [`Error::Provider`] with the errno as its source.
    pub fn provider(op: impl Into<Msg>, source: io::Error) -> Error {
        let op = op.into();
        match source.raw_os_error() {
            Some(libc::ENOMEM) => Error::NoMem { what: format!("{op} failed").into(), source: Some(source) },
            None | Some(0) => Error::Unknown(format!("{op} failed: {source}").into()),
            Some(_) => Error::Provider { op, source },
        }
    }

    /// [`Error::Provider`] for `op` whatever the errno (librpma's mapping
    /// for calls it does not specialise).
    pub(crate) fn provider_raw(op: impl Into<Msg>, source: io::Error) -> Error {
        Error::Provider { op: op.into(), source }
    }
}

/// An argument as the checks name it: its [`Arg`] for the [`Detail`], and
/// the words that begin the message (`"read: dst"`; an element's index is
/// added when shown).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Named {
    pub(crate) arg: Arg,
    pub(crate) text: &'static str,
}

impl Named {
    pub(crate) const fn new(arg: Arg, text: &'static str) -> Named {
        Named { arg, text }
    }

    /// Element `i` of the list this names.
    pub(crate) fn element(self, i: usize) -> Named {
        let arg = match self.arg {
            Arg::Dst | Arg::DstElement(_) => Arg::DstElement(i),
            _ => Arg::SrcElement(i),
        };
        Named { arg, text: self.text }
    }
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.arg {
            Arg::SrcElement(i) | Arg::DstElement(i) => write!(f, "{}[{i}]", self.text),
            _ => f.write_str(self.text),
        }
    }
}

/// `timeout` in whole milliseconds (rounded up: never shorter than asked),
/// as librpma's calls take it.
///
/// # Errors
/// [`Error::Inval`] with [`Detail::TooLong`] above `i32::MAX` ms.
pub(crate) fn timeout_ms(what: &Named, timeout: std::time::Duration) -> Result<i32> {
    let ms = timeout.as_nanos().div_ceil(1_000_000);
    i32::try_from(ms).map_err(|_| {
        let len = u64::try_from(ms).unwrap_or(u64::MAX);
        let text = format!("{what}: {timeout:?} is longer than librpma's calls take ({} ms)", i32::MAX);
        Error::too_long(what.arg, len, i32::MAX as u64, text)
    })
}

/// librpma's `rpma_err_2str`: the fixed description of a code.
///
/// ```
/// assert_eq!(rpma::err_2str(0), "Success");
/// assert_eq!(rpma::err_2str(rpma::error::RPMA_E_NO_EVENT), "No next event available");
/// assert_eq!(rpma::err_2str(42), "Unknown error");
/// ```
pub fn err_2str(code: i32) -> &'static str {
    match code {
        0 => "Success",
        RPMA_E_NOSUPP => "Not supported",
        RPMA_E_PROVIDER => "Provider error occurred",
        RPMA_E_NOMEM => "Out of memory",
        RPMA_E_INVAL => "Invalid argument",
        RPMA_E_NO_COMPLETION => "No next completion available",
        RPMA_E_NO_EVENT => "No next event available",
        RPMA_E_AGAIN => "Temporary error, try again",
        RPMA_E_SHARED_CHANNEL => "Completion channel is shared",
        RPMA_E_NOT_SHARED_CHNL => "Completion channel is not shared",
        _ => "Unknown error",
    }
}

/// An [`Error`] as an [`io::Error`]: a provider failure keeps its errno;
/// the others map to the nearest [`io::ErrorKind`] and keep the error as
/// their source.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::Provider { source, .. } => {
                if let Some(errno) = source.raw_os_error() {
                    return io::Error::from_raw_os_error(errno);
                }
                source.kind()
            }
            Error::Inval(_) => io::ErrorKind::InvalidInput,
            Error::NoSupp(_) => io::ErrorKind::Unsupported,
            Error::NoMem { .. } => io::ErrorKind::OutOfMemory,
            Error::NoCompletion | Error::NoEvent | Error::Again(_) => io::ErrorKind::WouldBlock,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn codes_and_strings_match_librpma() {
        let all: Vec<(Error, i32, &str)> = vec![
            (Error::Unknown("x".into()), -100000, "Unknown error"),
            (Error::NoSupp("x".into()), -100001, "Not supported"),
            (Error::provider_raw("ibv_x", io::Error::from_raw_os_error(libc::EIO)), -100002, "Provider error occurred"),
            (Error::nomem("x"), -100003, "Out of memory"),
            (Error::Inval("x".into()), -100004, "Invalid argument"),
            (Error::NoCompletion, -100005, "No next completion available"),
            (Error::NoEvent, -100006, "No next event available"),
            (Error::Again("x".into()), -100007, "Temporary error, try again"),
            (Error::SharedChannel("x".into()), -100008, "Completion channel is shared"),
            (Error::NotSharedChnl("x".into()), -100009, "Completion channel is not shared"),
        ];
        for (e, code, s) in all {
            assert_eq!(e.code(), code, "{e:?}");
            assert_eq!(err_2str(code), s);
        }
        assert_eq!(err_2str(0), "Success");
        assert_eq!(err_2str(-1), "Unknown error");
        assert_eq!(err_2str(-100010), "Unknown error");
    }

    #[test]
    fn provider_keeps_errno_as_source() {
        let e = Error::provider("ibv_reg_mr", io::Error::from_raw_os_error(libc::EFAULT));
        assert_eq!(e.errno(), Some(libc::EFAULT));
        let src = e.source().expect("source").downcast_ref::<io::Error>().unwrap();
        assert_eq!(src.raw_os_error(), Some(libc::EFAULT));
        // Display or source, never both: the errno's text is the source's.
        assert_eq!(e.to_string(), "provider error: ibv_reg_mr failed");
        assert_eq!(src.to_string(), io::Error::from_raw_os_error(libc::EFAULT).to_string());
    }

    #[test]
    fn provider_maps_enomem_and_missing_errno() {
        let e = Error::provider("ibv_alloc_pd", io::Error::from_raw_os_error(libc::ENOMEM));
        assert_eq!(e.code(), RPMA_E_NOMEM);
        assert_eq!(e.errno(), Some(libc::ENOMEM), "the errno is kept");
        assert_eq!(e.to_string(), "out of memory: ibv_alloc_pd failed");
        assert!(e.source().is_some());
        assert_eq!(Error::nomem("a table").errno(), None);
        let e = Error::provider("ibv_alloc_pd", io::Error::other("no errno"));
        assert_eq!(e.code(), RPMA_E_UNKNOWN);
        assert_eq!(e.errno(), None);
    }
}

#[cfg(test)]
mod detail_tests {
    use super::*;

    #[test]
    fn a_detail_costs_the_error_no_size() {
        // A `Result<()>` is returned on every post: the message is one
        // pointer (built on the error paths only), so the error is small
        // and its `Ok` test a tag compare.
        assert_eq!(std::mem::size_of::<Msg>(), std::mem::size_of::<usize>());
        assert!(std::mem::size_of::<Error>() <= 24, "{}", std::mem::size_of::<Error>());
    }

    #[test]
    fn details_are_matched_and_errors_become_io_errors() {
        let d = Detail::OutOfRange { what: Arg::Dst, offset: 8, len: 8, size: 8 };
        let e = Error::Inval(Msg::detailed(d.clone(), "read: dst: offset 8 + length 8 exceeds 8".into()));
        assert_eq!(e.detail(), Some(&d));
        assert!(e.to_string().contains("exceeds 8"), "{e}");
        assert_eq!(Error::inval("plain").detail(), None);
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::InvalidInput);
        let p = Error::Provider { op: "ibv_post_send".into(), source: io::Error::from_raw_os_error(libc::EINVAL) };
        assert_eq!(io::Error::from(p).raw_os_error(), Some(libc::EINVAL));
        assert_eq!(io::Error::from(Error::unsupported("x")).kind(), io::ErrorKind::Unsupported);
    }

    #[test]
    fn checks_with_a_detail_keep_their_code_and_text() {
        let e = crate::peer::Capabilities::check_size(&Named::new(Arg::SqSize, "ConnCfg sq_size"), 5, 4, "max_qp_wr")
            .unwrap_err();
        assert_eq!(e.code(), RPMA_E_INVAL);
        assert_eq!(e.detail(), Some(&Detail::TooLong { what: Arg::SqSize, len: 5, max: 4 }));
        assert_eq!(e.to_string(), "invalid argument: ConnCfg sq_size 5 exceeds the device's max_qp_wr 4");
        let e = crate::inflight::chain_is_full();
        let max = rpma_sys::chain::MAX_CHAIN as u64;
        assert_eq!(e.detail(), Some(&Detail::TooLong { what: Arg::Chain, len: max + 1, max }));
        assert_eq!(e.to_string(), format!("invalid argument: a chain holds at most {max} operations"));
        let cases = [
            (
                Error::misaligned(Arg::Dst, 4, 8, "atomic_write: dst_offset 4 is not a multiple of 8"),
                RPMA_E_INVAL,
                Detail::Misaligned { what: Arg::Dst, value: 4, align: 8 },
                "invalid argument: atomic_write: dst_offset 4 is not a multiple of 8",
            ),
            (
                Error::empty(Arg::Src, "write_sg: src: the list is empty"),
                RPMA_E_INVAL,
                Detail::Empty { what: Arg::Src },
                "invalid argument: write_sg: src: the list is empty",
            ),
            (
                Error::foreign(Arg::Srq, "the SRQ was created on another peer"),
                RPMA_E_INVAL,
                Detail::Foreign { what: Arg::Srq },
                "invalid argument: the SRQ was created on another peer",
            ),
            (
                Error::region_busy(0, 1, "dereg: the region is busy: 1 memory window(s) are bound over it"),
                RPMA_E_AGAIN,
                Detail::RegionBusy { in_flight: 0, windows: 1 },
                "temporary error, try again: dereg: the region is busy: 1 memory window(s) are bound over it",
            ),
            (
                Error::cq_full(20, 30, 20, "the shared CQ has 20 of its 30 entries reserved"),
                RPMA_E_INVAL,
                Detail::CqFull { reserved: 20, size: 30, need: 20 },
                "invalid argument: the shared CQ has 20 of its 30 entries reserved",
            ),
        ];
        for (e, code, detail, text) in cases {
            assert_eq!((e.code(), e.detail(), e.to_string().as_str()), (code, Some(&detail), text));
        }
        assert_eq!(io::Error::from(Error::region_busy(1, 0, "x")).kind(), io::ErrorKind::WouldBlock);
    }
}
