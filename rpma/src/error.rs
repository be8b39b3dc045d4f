//! The error type: one variant per librpma error code.

use std::borrow::Cow;
use std::io;

/// A message naming what was wrong (which argument, which bound).
pub type Msg = Cow<'static, str>;

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
    /// `RPMA_E_PROVIDER`: the verbs provider failed; `source` carries its errno.
    #[error("provider error: {op} failed: {source}")]
    Provider {
        /// The verbs call (or step) that failed.
        op: Msg,
        /// The provider's error, with the errno.
        #[source]
        source: io::Error,
    },
    /// `RPMA_E_NOMEM`: out of memory (host or device resources).
    #[error("out of memory: {0}")]
    NoMem(Msg),
    /// `RPMA_E_NO_COMPLETION`: no completion is available (yet).
    #[error("no next completion available")]
    NoCompletion,
    /// `RPMA_E_NO_EVENT`: no event is available (non-blocking fd).
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
            Error::NoMem(_) => RPMA_E_NOMEM,
            Error::NoCompletion => RPMA_E_NO_COMPLETION,
            Error::NoEvent => RPMA_E_NO_EVENT,
            Error::Again(_) => RPMA_E_AGAIN,
            Error::SharedChannel(_) => RPMA_E_SHARED_CHANNEL,
            Error::NotSharedChnl(_) => RPMA_E_NOT_SHARED_CHNL,
            Error::Unknown(_) => RPMA_E_UNKNOWN,
        }
    }

    /// The provider's errno, for [`Error::Provider`].
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Provider { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// An [`Error::Inval`] with the given message.
    pub fn inval(msg: impl Into<Msg>) -> Error {
        Error::Inval(msg.into())
    }

    /// An [`Error::NoSupp`] with the given message.
    pub fn nosupp(msg: impl Into<Msg>) -> Error {
        Error::NoSupp(msg.into())
    }

    /// Maps a provider failure of `op` as librpma does: `ENOMEM` becomes
    /// [`Error::NoMem`], a failure without errno [`Error::Unknown`], anything
    /// else [`Error::Provider`] with the errno as its source.
    pub fn provider(op: impl Into<Msg>, source: io::Error) -> Error {
        let op = op.into();
        match source.raw_os_error() {
            Some(libc::ENOMEM) => Error::NoMem(format!("{op} failed: {source}").into()),
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
            (Error::NoMem("x".into()), -100003, "Out of memory"),
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
        assert!(e.to_string().starts_with("provider error: ibv_reg_mr failed"), "{e}");
    }

    #[test]
    fn provider_maps_enomem_and_missing_errno() {
        let e = Error::provider("ibv_alloc_pd", io::Error::from_raw_os_error(libc::ENOMEM));
        assert_eq!(e.code(), RPMA_E_NOMEM);
        assert!(e.to_string().contains("ibv_alloc_pd"));
        let e = Error::provider("ibv_alloc_pd", io::Error::other("no errno"));
        assert_eq!(e.code(), RPMA_E_UNKNOWN);
        assert_eq!(e.errno(), None);
    }
}
