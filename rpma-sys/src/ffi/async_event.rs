//! `ibv_get_async_event` / `ibv_ack_async_event` and their types, written by
//! hand (the checked-in bindings' allowlist predates them); their layout is
//! compared with the installed headers by `layout_tests.rs` like the rest.

use super::{ibv_context, ibv_cq, ibv_qp, ibv_srq};
use std::os::raw::{c_int, c_void};

/// `enum ibv_event_type` values.
pub mod ibv_event_type {
    pub const IBV_EVENT_CQ_ERR: u32 = 0;
    pub const IBV_EVENT_QP_FATAL: u32 = 1;
    pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
    pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
    pub const IBV_EVENT_COMM_EST: u32 = 4;
    pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
    pub const IBV_EVENT_PATH_MIG: u32 = 6;
    pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
    pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
    pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
    pub const IBV_EVENT_PORT_ERR: u32 = 10;
    pub const IBV_EVENT_LID_CHANGE: u32 = 11;
    pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
    pub const IBV_EVENT_SM_CHANGE: u32 = 13;
    pub const IBV_EVENT_SRQ_ERR: u32 = 14;
    pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
    pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
    pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
    pub const IBV_EVENT_GID_CHANGE: u32 = 18;
    pub const IBV_EVENT_WQ_FATAL: u32 = 19;
}

/// The union `element` of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut c_void,
    pub port_num: c_int,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: u32,
}

extern "C" {
    pub fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int;
    pub fn ibv_ack_async_event(event: *mut ibv_async_event);
}
