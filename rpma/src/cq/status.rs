//! The status of a completion.

use std::fmt;

/// Status of a completion (`enum ibv_wc_status`).
///
/// ```
/// use rpma::WcStatus;
/// assert!(WcStatus::SUCCESS.is_success());
/// assert_eq!(WcStatus::REM_ACCESS_ERR.as_str(), "remote access error");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

impl WcStatus {
    /// `IBV_WC_SUCCESS`.
    pub const SUCCESS: WcStatus = WcStatus(0);
    /// `IBV_WC_LOC_PROT_ERR`.
    pub const LOC_PROT_ERR: WcStatus = WcStatus(4);
    /// `IBV_WC_WR_FLUSH_ERR`: flushed because the QP went to the error state.
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(5);
    /// `IBV_WC_REM_ACCESS_ERR`: the remote side refused the access.
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(10);
    /// `IBV_WC_RETRY_EXC_ERR`: the remote side did not answer.
    pub const RETRY_EXC_ERR: WcStatus = WcStatus(12);

    /// Whether the operation succeeded.
    pub fn is_success(self) -> bool {
        self.0 == 0
    }

    /// libibverbs' description (`ibv_wc_status_str`).
    pub fn as_str(self) -> &'static str {
        const S: [&str; 24] = [
            "success",
            "local length error",
            "local QP operation error",
            "local EE context operation error",
            "local protection error",
            "Work Request Flushed Error",
            "memory management operation error",
            "bad response error",
            "local access error",
            "remote invalid request error",
            "remote access error",
            "remote operation error",
            "transport retry counter exceeded",
            "RNR retry counter exceeded",
            "local RDD violation error",
            "remote invalid RD request",
            "aborted error",
            "invalid EE context number",
            "invalid EE context state",
            "fatal error",
            "response timeout error",
            "general error",
            "TM error",
            "TM software rendezvous",
        ];
        S.get(self.0 as usize).copied().unwrap_or("unknown")
    }
}

impl fmt::Debug for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WcStatus({}: {})", self.0, self.as_str())
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
