//! The limits the device granted a connection for scatter/gather lists
//! and inline data (not in librpma): what [`crate::ops::WriteSg`],
//! [`crate::ops::WriteInline`] and the other list and inline operations
//! are checked against.

use super::Conn;

impl Conn {
    /// The bytes an operation may carry inline on this connection: what the
    /// device granted for [`ConnCfg::set_max_inline_data`](crate::ConnCfg::set_max_inline_data)
    /// (at least that), read when the connection was set up.
    pub fn max_inline_data(&self) -> u32 {
        self.parts.limits.max_inline_data
    }

    /// The scatter/gather elements a send-queue operation may carry on this
    /// connection: what the device granted for
    /// [`ConnCfg::set_max_send_sge`](crate::ConnCfg::set_max_send_sge) (at
    /// least that), at most [`MAX_SGL`](crate::conn_cfg::MAX_SGL).
    pub fn max_send_sge(&self) -> u32 {
        self.parts.limits.max_send_sge
    }

    /// The scatter/gather elements a receive may carry on this connection:
    /// what the device granted for
    /// [`ConnCfg::set_max_recv_sge`](crate::ConnCfg::set_max_recv_sge) (at
    /// least that), at most [`MAX_SGL`](crate::conn_cfg::MAX_SGL).
    pub fn max_recv_sge(&self) -> u32 {
        self.parts.limits.max_recv_sge
    }
}
