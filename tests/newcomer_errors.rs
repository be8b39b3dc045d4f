//! The first errors a newcomer meets say what to do, typed
//! ([`Detail::NoDevice`]): on this host as it is (with or without an RDMA
//! device). The same calls on a device are in `device_verbs`.

use rpma::device::{get_ibv_context, ContextType};
use rpma::error::{Detail, RPMA_E_PROVIDER};
use rpma::IbvContext;

#[test]
fn no_device_on_the_host_says_what_to_do() {
    let devs = rpma::device::devices().unwrap();
    match IbvContext::open(None) {
        Ok(ctx) => assert!(!devs.is_empty(), "{} opened, but sysfs lists no device", ctx.device_name()),
        Err(e) => {
            assert_eq!(e.code(), RPMA_E_PROVIDER, "{e}");
            assert_eq!(e.detail(), Some(&Detail::NoDevice { addr: None, loopback: false }), "{e}");
            // The hint is the subject: what to run.
            let t = e.to_string();
            assert!(t.contains("rdma link add") || t.contains("ibverbs-providers"), "{t}");
            println!("{t}");
        }
    }
    let e = IbvContext::open(Some("no-such-device0")).unwrap_err();
    assert!(matches!(e.detail(), Some(Detail::NoDevice { addr: None, .. })), "{e}");
    assert_eq!(e.code(), RPMA_E_PROVIDER, "no device is one code whatever the path: {e}");
}

#[test]
fn loopback_and_foreign_addresses_say_what_to_do() {
    for (addr, lo) in [("127.0.0.1", true), ("::1", true), ("192.0.2.77", false)] {
        let e = get_ibv_context(addr, ContextType::Local).unwrap_err();
        assert_eq!(e.code(), RPMA_E_PROVIDER, "{e}");
        assert_eq!(e.detail(), Some(&Detail::NoDevice { addr: Some(addr.into()), loopback: lo }), "{e}");
        let t = e.to_string();
        if lo {
            assert!(t.contains("loopback"), "{t}");
        }
        assert!(t.contains("use an address an RDMA device has") || t.contains("no RDMA device"), "{t}");
        println!("{t}");
    }
}
