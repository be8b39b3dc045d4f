//! Compares the checked-in bindings with the installed rdma-core headers:
//! every size, member offset and constant rpma-sys uses is printed by a C
//! program compiled against `infiniband/verbs.h` and `rdma/rdma_cma.h` with
//! the C compiler (`$CC`, else `cc`, with the words of `$CFLAGS`, e.g.
//! `-I` another rdma-core's headers), and must equal the Rust value.
//!
//! Members newer than the installed headers (rdma-core 44 has no
//! `ibv_qp_ex::wr_flush`) are compared only where the headers have them; the
//! crate never reads them otherwise (see `qp.rs`).

use crate::ffi;
use std::mem::{offset_of, size_of};
use std::process::Command;

struct Check {
    c: String,
    rust: u64,
    /// Compared only when the headers have `IBV_QP_EX_WITH_FLUSH` (rdma-core 45+).
    newer: bool,
}

macro_rules! size {
    ($t:ident) => {
        Check { c: format!("sizeof(struct {})", stringify!($t)), rust: size_of::<ffi::$t>() as u64, newer: false }
    };
}
macro_rules! off {
    ($t:ident, $($f:ident).+) => {
        Check {
            c: format!("offsetof(struct {}, {})", stringify!($t), stringify!($($f).+).replace(' ', "")),
            rust: offset_of!(ffi::$t, $($f).+) as u64,
            newer: false,
        }
    };
}
macro_rules! val {
    ($c:ident, $r:expr) => {
        Check { c: stringify!($c).to_string(), rust: $r as u64, newer: false }
    };
}

fn checks() -> Vec<Check> {
    use ffi::*;
    let mut v = vec![
        size!(ibv_sge),
        size!(ibv_async_event),
        off!(ibv_async_event, event_type),
        val!(IBV_EVENT_QP_FATAL, ibv_event_type::IBV_EVENT_QP_FATAL),
        val!(IBV_EVENT_QP_ACCESS_ERR, ibv_event_type::IBV_EVENT_QP_ACCESS_ERR),
        val!(IBV_EVENT_COMM_EST, ibv_event_type::IBV_EVENT_COMM_EST),
        val!(IBV_EVENT_DEVICE_FATAL, ibv_event_type::IBV_EVENT_DEVICE_FATAL),
        val!(IBV_EVENT_PORT_ACTIVE, ibv_event_type::IBV_EVENT_PORT_ACTIVE),
        val!(IBV_EVENT_PORT_ERR, ibv_event_type::IBV_EVENT_PORT_ERR),
        val!(IBV_EVENT_SRQ_LIMIT_REACHED, ibv_event_type::IBV_EVENT_SRQ_LIMIT_REACHED),
        val!(IBV_EVENT_QP_LAST_WQE_REACHED, ibv_event_type::IBV_EVENT_QP_LAST_WQE_REACHED),
        val!(IBV_EVENT_GID_CHANGE, ibv_event_type::IBV_EVENT_GID_CHANGE),
        val!(IBV_EVENT_WQ_FATAL, ibv_event_type::IBV_EVENT_WQ_FATAL),
        off!(ibv_sge, lkey),
        size!(ibv_send_wr),
        off!(ibv_send_wr, wr_id),
        off!(ibv_send_wr, next),
        off!(ibv_send_wr, sg_list),
        off!(ibv_send_wr, num_sge),
        off!(ibv_send_wr, opcode),
        off!(ibv_send_wr, send_flags),
        off!(ibv_send_wr, wr.rdma.remote_addr),
        off!(ibv_send_wr, wr.rdma.rkey),
        off!(ibv_send_wr, qp_type),
        size!(ibv_recv_wr),
        off!(ibv_recv_wr, num_sge),
        size!(ibv_wc),
        off!(ibv_wc, status),
        off!(ibv_wc, opcode),
        off!(ibv_wc, vendor_err),
        off!(ibv_wc, byte_len),
        off!(ibv_wc, qp_num),
        off!(ibv_wc, src_qp),
        off!(ibv_wc, wc_flags),
        size!(ibv_mw_bind),
        off!(ibv_mw_bind, bind_info),
        size!(ibv_mw_bind_info),
        off!(ibv_mw_bind_info, mw_access_flags),
        off!(ibv_mw, context),
        off!(ibv_mw, rkey),
        off!(ibv_mr, addr),
        off!(ibv_mr, length),
        off!(ibv_mr, lkey),
        off!(ibv_mr, rkey),
        off!(ibv_qp, context),
        off!(ibv_qp, qp_num),
        off!(ibv_cq, context),
        off!(ibv_cq, cqe),
        off!(ibv_srq, context),
        off!(ibv_pd, context),
        off!(ibv_comp_channel, fd),
        off!(ibv_device, transport_type),
        off!(ibv_context, device),
        off!(ibv_context, ops.bind_mw),
        off!(ibv_context, ops.alloc_mw),
        off!(ibv_context, ops.dealloc_mw),
        off!(ibv_context, ops.poll_cq),
        off!(ibv_context, ops.req_notify_cq),
        off!(ibv_context, ops.post_srq_recv),
        off!(ibv_context, ops.post_send),
        off!(ibv_context, ops.post_recv),
        off!(ibv_context, abi_compat),
        size!(verbs_context),
        off!(verbs_context, query_device_ex),
        off!(verbs_context, query_port),
        off!(ibv_context, ops._compat_query_port),
        off!(ibv_port_attr, max_mtu),
        off!(ibv_port_attr, active_mtu),
        off!(ibv_port_attr, lid),
        off!(ibv_port_attr, sm_lid),
        val!(IBV_MTU_256, IBV_MTU_256),
        val!(IBV_MTU_4096, IBV_MTU_4096),
        off!(verbs_context, create_cq_ex),
        off!(verbs_context, create_qp_ex),
        off!(verbs_context, advise_mr),
        off!(verbs_context, sz),
        off!(verbs_context, context),
        off!(ibv_qp_ex, qp_base),
        off!(ibv_qp_ex, comp_mask),
        off!(ibv_qp_ex, wr_id),
        off!(ibv_qp_ex, wr_flags),
        off!(ibv_qp_ex, wr_atomic_write),
        off!(ibv_qp_ex, wr_start),
        off!(ibv_qp_ex, wr_complete),
        size!(ibv_qp_init_attr),
        off!(ibv_qp_init_attr, cap.max_inline_data),
        size!(ibv_qp_init_attr_ex),
        off!(ibv_qp_init_attr_ex, send_cq),
        off!(ibv_qp_init_attr_ex, recv_cq),
        off!(ibv_qp_init_attr_ex, srq),
        off!(ibv_qp_init_attr_ex, cap.max_send_wr),
        off!(ibv_qp_init_attr_ex, cap.max_inline_data),
        off!(ibv_qp_init_attr_ex, qp_type),
        off!(ibv_qp_init_attr_ex, sq_sig_all),
        off!(ibv_qp_init_attr_ex, comp_mask),
        off!(ibv_qp_init_attr_ex, pd),
        off!(ibv_qp_init_attr_ex, send_ops_flags),
        size!(ibv_qp_attr),
        off!(ibv_qp_attr, min_rnr_timer),
        off!(ibv_qp_attr, timeout),
        off!(ibv_qp_attr, retry_cnt),
        off!(ibv_qp_attr, rnr_retry),
        size!(ibv_cq_init_attr_ex),
        off!(ibv_cq_init_attr_ex, channel),
        off!(ibv_cq_init_attr_ex, wc_flags),
        off!(ibv_cq_init_attr_ex, comp_mask),
        size!(ibv_srq_init_attr),
        off!(ibv_srq_init_attr, attr.max_sge),
        off!(ibv_device_attr, max_mr_size),
        off!(ibv_device_attr, fw_ver),
        off!(ibv_device_attr, vendor_id),
        off!(ibv_device_attr, vendor_part_id),
        off!(ibv_device_attr, hw_ver),
        off!(ibv_device_attr, max_qp_rd_atom),
        off!(ibv_device_attr, max_qp_init_rd_atom),
        off!(ibv_device_attr, atomic_cap),
        off!(ibv_device_attr, phys_port_cnt),
        off!(ibv_device_attr, device_cap_flags),
        off!(ibv_device_attr, max_qp_wr),
        off!(ibv_device_attr, max_sge),
        off!(ibv_device_attr, max_cqe),
        off!(ibv_device_attr, max_mr),
        off!(ibv_device_attr, max_mw),
        off!(ibv_device_attr, max_srq_wr),
        off!(ibv_device_attr_ex, odp_caps.general_caps),
        off!(ibv_device_attr_ex, odp_caps.per_transport_caps.rc_odp_caps),
        off!(ibv_device_attr_ex, device_cap_flags_ex),
        size!(rdma_conn_param),
        off!(rdma_conn_param, private_data_len),
        off!(rdma_conn_param, rnr_retry_count),
        size!(rdma_cm_event),
        off!(rdma_cm_event, event),
        off!(rdma_cm_event, status),
        off!(rdma_cm_event, param.conn),
        off!(rdma_cm_id, verbs),
        off!(rdma_cm_id, qp),
        off!(rdma_cm_id, event),
        size!(rdma_addrinfo),
        off!(rdma_addrinfo, ai_port_space),
        off!(rdma_addrinfo, ai_src_addr),
        off!(rdma_addrinfo, ai_dst_addr),
        val!(IBV_WR_RDMA_WRITE, ibv_wr_opcode::IBV_WR_RDMA_WRITE),
        val!(IBV_WR_RDMA_WRITE_WITH_IMM, ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM),
        val!(IBV_WR_SEND, ibv_wr_opcode::IBV_WR_SEND),
        val!(IBV_WR_SEND_WITH_IMM, ibv_wr_opcode::IBV_WR_SEND_WITH_IMM),
        val!(IBV_WR_RDMA_READ, ibv_wr_opcode::IBV_WR_RDMA_READ),
        val!(IBV_WR_SEND_WITH_INV, ibv_wr_opcode::IBV_WR_SEND_WITH_INV),
        val!(IBV_WR_LOCAL_INV, ibv_wr_opcode::IBV_WR_LOCAL_INV),
        val!(IBV_WR_BIND_MW, ibv_wr_opcode::IBV_WR_BIND_MW),
        val!(IBV_SEND_FENCE, ibv_send_flags::IBV_SEND_FENCE.0),
        val!(IBV_SEND_SIGNALED, ibv_send_flags::IBV_SEND_SIGNALED.0),
        val!(IBV_SEND_INLINE, ibv_send_flags::IBV_SEND_INLINE.0),
        val!(IBV_QPT_RC, ibv_qp_type::IBV_QPT_RC),
        val!(IBV_MW_TYPE_1, ibv_mw_type::IBV_MW_TYPE_1),
        val!(IBV_MW_TYPE_2, ibv_mw_type::IBV_MW_TYPE_2),
        val!(IBV_TRANSPORT_IB, ibv_transport_type::IBV_TRANSPORT_IB),
        val!(IBV_TRANSPORT_IWARP, ibv_transport_type::IBV_TRANSPORT_IWARP),
        val!(IBV_QP_INIT_ATTR_PD, ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0),
        val!(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0),
        val!(IBV_QP_CAP, ibv_qp_attr_mask::IBV_QP_CAP.0),
        val!(IBV_QP_TIMEOUT, ibv_qp_attr_mask::IBV_QP_TIMEOUT.0),
        val!(IBV_QP_RETRY_CNT, ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0),
        val!(IBV_QP_RNR_RETRY, ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0),
        val!(IBV_QP_MIN_RNR_TIMER, ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0),
        val!(IBV_QP_EX_WITH_RDMA_WRITE, ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_WRITE.0),
        val!(IBV_QP_EX_WITH_RDMA_READ, ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_RDMA_READ.0),
        val!(IBV_QP_EX_WITH_SEND, ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND.0),
        val!(IBV_QP_EX_WITH_BIND_MW, ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_BIND_MW.0),
        val!(IBV_QP_EX_WITH_LOCAL_INV, ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_LOCAL_INV.0),
        val!(IBV_QP_EX_WITH_ATOMIC_WRITE, ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_ATOMIC_WRITE.0),
        val!(IBV_ODP_SUPPORT, ibv_odp_general_caps::IBV_ODP_SUPPORT.0),
        val!(IBV_ODP_SUPPORT_READ, ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_READ.0),
        val!(IBV_ODP_SUPPORT_WRITE, ibv_odp_transport_cap_bits::IBV_ODP_SUPPORT_WRITE.0),
        val!(IBV_REREG_MR_CHANGE_TRANSLATION, ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_TRANSLATION.0),
        val!(IBV_REREG_MR_CHANGE_PD, ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_PD.0),
        val!(IBV_REREG_MR_CHANGE_ACCESS, ibv_rereg_mr_flags::IBV_REREG_MR_CHANGE_ACCESS.0),
        val!(IBV_WC_WITH_IMM, ibv_wc_flags::IBV_WC_WITH_IMM.0),
        val!(IBV_WC_WITH_INV, ibv_wc_flags::IBV_WC_WITH_INV.0),
        val!(RDMA_CM_EVENT_CONNECT_REQUEST, rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST),
        val!(RDMA_CM_EVENT_ESTABLISHED, rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED),
        val!(RDMA_CM_EVENT_DISCONNECTED, rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED),
        val!(RDMA_CM_EVENT_TIMEWAIT_EXIT, rdma_cm_event_type::RDMA_CM_EVENT_TIMEWAIT_EXIT),
        val!(RDMA_PS_TCP, rdma_port_space::RDMA_PS_TCP),
    ];
    // The union members, named through bindgen's anonymous members in Rust.
    let anon = |c: &str, rust: usize| Check { c: c.to_string(), rust: rust as u64, newer: false };
    v.push(anon(
        "offsetof(struct ibv_send_wr, imm_data)",
        offset_of!(ibv_send_wr, __bindgen_anon_1) + offset_of!(ibv_send_wr__bindgen_ty_1, imm_data),
    ));
    v.push(anon(
        "offsetof(struct ibv_send_wr, invalidate_rkey)",
        offset_of!(ibv_send_wr, __bindgen_anon_1) + offset_of!(ibv_send_wr__bindgen_ty_1, invalidate_rkey),
    ));
    v.push(anon(
        "offsetof(struct ibv_send_wr, bind_mw.rkey)",
        offset_of!(ibv_send_wr, __bindgen_anon_2) + offset_of!(ibv_send_wr__bindgen_ty_4__bindgen_ty_1, rkey),
    ));
    v.push(anon(
        "offsetof(struct ibv_send_wr, bind_mw.bind_info)",
        offset_of!(ibv_send_wr, __bindgen_anon_2) + offset_of!(ibv_send_wr__bindgen_ty_4__bindgen_ty_1, bind_info),
    ));
    v.push(anon(
        "offsetof(struct ibv_wc, imm_data)",
        offset_of!(ibv_wc, __bindgen_anon_1) + offset_of!(ibv_wc__bindgen_ty_1, imm_data),
    ));
    v.push(anon("offsetof(struct ibv_mw, type)", offset_of!(ibv_mw, type_)));
    // rdma-core 45+ only.
    let newer = |c: &str, rust: u64| Check { c: c.to_string(), rust, newer: true };
    v.push(newer("offsetof(struct ibv_qp_ex, wr_flush)", offset_of!(ibv_qp_ex, wr_flush) as u64));
    v.push(newer("IBV_QP_EX_WITH_FLUSH", ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_FLUSH.0 as u64));
    v.push(newer("IBV_ACCESS_FLUSH_GLOBAL", ibv_access_flags::IBV_ACCESS_FLUSH_GLOBAL.0 as u64));
    v.push(newer("IBV_ACCESS_FLUSH_PERSISTENT", ibv_access_flags::IBV_ACCESS_FLUSH_PERSISTENT.0 as u64));
    v
}

/// Whether the installed headers are rdma-core 45 or newer (they declare
/// `ibv_wr_flush`).
fn headers_have_flush(cc: &str) -> bool {
    let out = Command::new(cc)
        .args(cflags())
        .args(["-E", "-x", "c", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("piped stdin").write_all(b"#include <infiniband/verbs.h>\n")?;
            child.wait_with_output()
        })
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}`: {e}"));
    assert!(out.status.success(), "`{cc}` cannot preprocess <infiniband/verbs.h>: install libibverbs-dev");
    String::from_utf8_lossy(&out.stdout).contains("ibv_wr_flush")
}

fn cflags() -> Vec<String> {
    std::env::var("CFLAGS").unwrap_or_default().split_whitespace().map(String::from).collect()
}

#[test]
fn bindings_match_the_installed_headers() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let with_flush = headers_have_flush(&cc);
    let all = checks();
    let used: Vec<&Check> = all.iter().filter(|c| with_flush || !c.newer).collect();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\nint main(void) {\n",
    );
    for c in &used {
        src += &format!("    printf(\"%llu\\n\", (unsigned long long)({}));\n", c.c);
    }
    src += "    return 0;\n}\n";
    let dir = std::env::temp_dir().join(format!("rpma-sys-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c_file, exe) = (dir.join("layout.c"), dir.join("layout"));
    std::fs::write(&c_file, &src).unwrap();
    let out = Command::new(&cc).args(cflags()).arg("-o").arg(&exe).arg(&c_file).output().unwrap();
    assert!(out.status.success(), "compiling the layout probe failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    let c_values: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(c_values.len(), used.len());
    let bad: Vec<String> = used
        .iter()
        .zip(&c_values)
        .filter(|(c, v)| c.rust != **v)
        .map(|(c, v)| format!("{}: C {} vs Rust {}", c.c, v, c.rust))
        .collect();
    assert!(bad.is_empty(), "the bindings disagree with the installed headers:\n{}", bad.join("\n"));
    eprintln!(
        "layout: {} sizes, offsets and constants agree with the installed headers (rdma-core {})",
        used.len(),
        if with_flush { "45+" } else { "< 45" }
    );
}
