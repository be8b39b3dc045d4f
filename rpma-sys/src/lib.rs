pub use rdma_sys as ffi;
