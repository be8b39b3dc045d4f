//! Discovery: the host's RDMA devices, their ports, GIDs and the IP
//! addresses that reach them, read from sysfs (`/sys/class/infiniband`, what
//! `ibv_devinfo -v` and `rdma link show` read), what a device and a port
//! report when asked ([`DeviceAttrs`], [`PortAttrs`]), and the hints the
//! first errors give from them.

use crate::error::{Error, Result};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

/// Where the kernel lists RDMA devices.
const SYSFS: &str = "/sys/class/infiniband";

/// One RDMA device of this host ([`devices`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// The kernel's name (`rxe0`, `mlx5_0`): [`IbvContext::open`](crate::IbvContext::open) takes it.
    pub name: String,
    /// The node type as the kernel names it (`CA` for an InfiniBand or
    /// RoCE adapter, `RNIC` for iWARP).
    pub node_type: String,
    /// The node GUID, as the kernel prints it.
    pub node_guid: String,
    /// Its ports, by number.
    pub ports: Vec<PortInfo>,
}

/// One port of a device.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortInfo {
    /// The port number (from 1).
    pub port: u32,
    /// The logical state: only an [`Active`](PortState::Active) port
    /// carries connections.
    pub state: PortState,
    /// The physical state.
    pub phys_state: PhysState,
    /// What the port's link is: Ethernet (RoCE, iWARP) or InfiniBand.
    pub link_layer: LinkLayer,
    /// The rate, when the kernel reports one.
    pub rate: Option<Rate>,
    /// The GIDs in use (the zero ones left out).
    pub gids: Vec<GidInfo>,
}

impl PortInfo {
    /// Whether the port is up and can carry connections.
    pub fn is_active(&self) -> bool {
        self.state == PortState::Active
    }
}

/// Names the kernel gives codes of the IBA (`"4: ACTIVE"` in sysfs), and
/// libibverbs codes `ibv_devinfo` names; `$other` prefixes a code with no
/// name.
macro_rules! coded {
    ($(#[$m:meta])* $t:ident, $other:literal { $($(#[$vm:meta])* $v:ident = $code:literal, $name:literal;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $t {
            $($(#[$vm])* $v,)*
            /// A code this library does not name.
            Other(u32),
        }

        impl $t {
            /// The value of `code`.
            pub(crate) fn from_code(code: u32) -> $t {
                match code {
                    $($code => $t::$v,)*
                    n => $t::Other(n),
                }
            }
        }

        /// The kernel's name (`ibv_devinfo` prints the same).
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $($t::$v => f.write_str($name),)*
                    $t::Other(n) => write!(f, concat!($other, " {}"), n),
                }
            }
        }
    };
}

coded!(
    /// A port's logical state (`ibv_port_attr.state`, sysfs `state`).
    PortState, "state" {
        /// No state change (`IBV_PORT_NOP`), or none reported.
        Nop = 0, "NOP";
        /// The link is down.
        Down = 1, "DOWN";
        /// Initialising: up, not configured yet.
        Init = 2, "INIT";
        /// Configured, not yet active.
        Armed = 3, "ARMED";
        /// Active: it carries connections.
        Active = 4, "ACTIVE";
        /// Active, changing state.
        ActiveDefer = 5, "ACTIVE_DEFER";
    }
);

coded!(
    /// A port's physical state (`ibv_port_attr.phys_state`, sysfs
    /// `phys_state`).
    PhysState, "state" {
        /// Powered down.
        Sleep = 1, "Sleep";
        /// Looking for a link partner.
        Polling = 2, "Polling";
        /// Disabled.
        Disabled = 3, "Disabled";
        /// Training the link.
        PortConfigurationTraining = 4, "PortConfigurationTraining";
        /// The link is up.
        LinkUp = 5, "LinkUp";
        /// Recovering from a link error.
        LinkErrorRecovery = 6, "LinkErrorRecovery";
        /// In a physical test.
        PhyTest = 7, "Phy Test";
    }
);

coded!(
    /// Which remote atomics a device carries out (`ibv_device_attr.atomic_cap`):
    /// [`Conn::compare_and_swap`](crate::Conn::compare_and_swap) and
    /// [`Conn::fetch_and_add`](crate::Conn::fetch_and_add) need one other than
    /// [`Unsupported`](AtomicCap::Unsupported).
    AtomicCap, "atomic_cap" {
        /// None (`IBV_ATOMIC_NONE`).
        Unsupported = 0, "ATOMIC_NONE";
        /// Atomic among the operations of this device only (`IBV_ATOMIC_HCA`).
        Hca = 1, "ATOMIC_HCA";
        /// Atomic also against the host's CPUs and other devices
        /// (`IBV_ATOMIC_GLOB`).
        Global = 2, "ATOMIC_GLOB";
    }
);

/// What a device says of itself when asked (`ibv_query_device`), beyond
/// rpma's probe ([`Peer::capabilities`](crate::Peer::capabilities)): the
/// identity and limits `ibv_devinfo` prints first, from
/// [`IbvContext::attributes`](crate::IbvContext::attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttrs {
    /// The firmware version, as the driver writes it: to compare with the
    /// vendor's release notes or a peer's, when a feature or fix depends on it.
    pub fw_ver: String,
    /// The vendor's IEEE OUI (`0x02c9`: Mellanox/NVIDIA): with
    /// [`vendor_part_id`](Self::vendor_part_id), which adapter this is.
    pub vendor_id: u32,
    /// The vendor's part number (`4123`: ConnectX-6): which model, for the
    /// vendor's documentation and known issues.
    pub vendor_part_id: u32,
    /// The hardware revision: which stepping of the part, for errata.
    pub hw_ver: u32,
    /// How many RDMA READs and atomics a queue pair answers at once
    /// (`max_qp_rd_atom`): what bounds a peer's reads in flight against this
    /// device (a deeper queue of reads waits for it).
    pub max_qp_rd_atom: u32,
    /// How many RDMA READs and atomics a queue pair issues at once
    /// (`max_qp_init_rd_atom`): what bounds this side's reads in flight.
    pub max_qp_init_rd_atom: u32,
    /// Which remote atomics the device carries out: whether compare-and-swap
    /// and fetch-and-add work, and against whom they are atomic.
    pub atomic_cap: AtomicCap,
    /// How many ports the device has (numbered from 1): the ports
    /// [`IbvContext::port_attributes`](crate::IbvContext::port_attributes)
    /// takes.
    pub phys_port_cnt: u8,
}

/// What a port says of itself when asked (`ibv_query_port`), beyond what
/// [`PortInfo`] reads from sysfs: the MTUs and LIDs `ibv_devinfo` prints,
/// from [`IbvContext::port_attributes`](crate::IbvContext::port_attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttrs {
    /// The port number (from 1).
    pub port: u32,
    /// The path MTU in use, in bytes (256 to 4096; `None`: a code libibverbs
    /// does not name): the largest payload of one packet, so messages
    /// longer than it go as several packets; both sides of a connection
    /// must agree on it (on RoCE it follows the interface's MTU).
    pub active_mtu: Option<u32>,
    /// The largest MTU the port supports, in bytes (`None` as above): what
    /// [`active_mtu`](Self::active_mtu) could be raised to.
    pub max_mtu: Option<u32>,
    /// The port's local identifier on an InfiniBand subnet (0 on RoCE and
    /// iWARP, or before the subnet manager assigned one): an InfiniBand
    /// port without one cannot connect.
    pub lid: u16,
    /// The LID of the InfiniBand subnet manager the port reports to (0 on
    /// RoCE and iWARP, or when no subnet manager runs): on InfiniBand, 0
    /// means start one (`opensm`).
    pub sm_lid: u16,
}

/// A port's link layer (sysfs `link_layer`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LinkLayer {
    /// InfiniBand.
    InfiniBand,
    /// Ethernet: RoCE or iWARP; its GIDs stand for IP addresses.
    Ethernet,
    /// Another name the kernel gave (none when it gave none).
    Other(String),
}

impl LinkLayer {
    fn parse(s: &str) -> LinkLayer {
        match s {
            "InfiniBand" => LinkLayer::InfiniBand,
            "Ethernet" => LinkLayer::Ethernet,
            other => LinkLayer::Other(other.to_string()),
        }
    }
}

/// The kernel's name (`InfiniBand`, `Ethernet`).
impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Other(s) => s,
        })
    }
}

/// A port's rate (sysfs `rate`, e.g. `100 Gb/sec (4X EDR)`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Rate {
    /// The rate in Mbit/s (100 Gb/sec: 100,000).
    pub mbit_per_s: u64,
    /// The kernel's text, with the width and speed it names.
    pub text: String,
}

impl Rate {
    /// `"2.5 Gb/sec (1X SDR)"`: 2,500 Mbit/s.
    fn parse(text: &str) -> Option<Rate> {
        let (num, unit) = text.split_once(' ')?;
        if !unit.starts_with("Gb/sec") {
            return None;
        }
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        let frac3: String = frac.chars().chain(std::iter::repeat('0')).take(3).collect();
        let mbit = int.parse::<u64>().ok()?.checked_mul(1000)?.checked_add(frac3.parse::<u64>().ok()?)?;
        Some(Rate { mbit_per_s: mbit, text: text.to_string() })
    }
}

/// The kernel's text.
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One GID of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GidInfo {
    /// The index in the port's GID table.
    pub index: u32,
    /// The GID.
    pub gid: Ipv6Addr,
    /// Its type on RoCE (`RoCE v2`, `IB/RoCE v1`), when the kernel says.
    pub kind: Option<String>,
    /// The network interface it belongs to on RoCE (`eth0`).
    pub netdev: Option<String>,
    /// The IP address it stands for on RoCE (an IPv4-mapped GID is that
    /// IPv4 address): what [`get_ibv_context`](crate::device::get_ibv_context)
    /// and [`Ep::listen`](crate::Ep::listen) take. `None` on InfiniBand.
    pub ip: Option<IpAddr>,
}

/// Every RDMA device of this host, with ports and GIDs; empty when there is
/// none (or no RDMA support in the kernel: no `/sys/class/infiniband`).
///
/// ```no_run
/// use rpma::device::PortState;
/// for d in rpma::device::devices()? {
///     for p in d.ports.iter().filter(|p| p.state == PortState::Active) {
///         let ips: Vec<_> = p.gids.iter().filter_map(|g| g.ip).collect();
///         println!("{} port {}: {} {ips:?}", d.name, p.port, p.link_layer);
///     }
/// }
/// # Ok::<(), rpma::Error>(())
/// ```
///
/// # Errors
/// [`Error::Provider`] when the kernel's list cannot be read (permission
/// denied, a sysfs that is not mounted as expected): not the same as no
/// device.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    devices_in(Path::new(SYSFS))
}

fn read(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// `"4: ACTIVE"` -> `"ACTIVE"`.
fn state_name(s: Option<String>) -> String {
    let s = s.unwrap_or_default();
    s.split_once(": ").map_or(s.clone(), |(_, n)| n.to_string())
}

/// `"4: ACTIVE"` -> 4 (0 when missing or unreadable).
fn state_code(s: Option<String>) -> u32 {
    s.and_then(|s| s.split_once(':').and_then(|(n, _)| n.trim().parse().ok())).unwrap_or(0)
}

/// The names in a directory, sorted (numerically when they are numbers).
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    v.sort_by_key(|n| (n.parse::<u64>().unwrap_or(u64::MAX), n.clone()));
    v
}

/// [`devices`] under another sysfs root (tests use a made-up one).
pub(crate) fn devices_in(root: &Path) -> Result<Vec<DeviceInfo>> {
    // The root itself: absent is no device, unreadable is an error.
    match std::fs::read_dir(root) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::provider_raw(format!("reading {}", root.display()), e)),
    }
    Ok(entries(root)
        .into_iter()
        .map(|name| {
            let d = root.join(&name);
            let ports = entries(&d.join("ports"))
                .into_iter()
                .filter_map(|p| Some((p.parse::<u32>().ok()?, d.join("ports").join(p))))
                .map(|(port, pd)| port_info(port, &pd))
                .collect();
            DeviceInfo {
                node_type: state_name(read(&d.join("node_type"))),
                node_guid: read(&d.join("node_guid")).unwrap_or_default(),
                name,
                ports,
            }
        })
        .collect())
}

fn port_info(port: u32, pd: &Path) -> PortInfo {
    let link_layer = LinkLayer::parse(&read(&pd.join("link_layer")).unwrap_or_default());
    let gids = entries(&pd.join("gids"))
        .into_iter()
        .filter_map(|i| {
            let index = i.parse::<u32>().ok()?;
            let gid: Ipv6Addr = read(&pd.join("gids").join(&i))?.parse().ok()?;
            if gid.is_unspecified() {
                return None;
            }
            // The attributes of an unused entry fail to read; of a used one
            // they name its type and interface.
            let kind = read(&pd.join("gid_attrs/types").join(&i)).filter(|s| !s.is_empty());
            let netdev = read(&pd.join("gid_attrs/ndevs").join(&i)).filter(|s| !s.is_empty());
            let ip = (link_layer == LinkLayer::Ethernet).then(|| match gid.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(gid),
            });
            Some(GidInfo { index, gid, kind, netdev, ip })
        })
        .collect();
    PortInfo {
        port,
        state: PortState::from_code(state_code(read(&pd.join("state")))),
        phys_state: PhysState::from_code(state_code(read(&pd.join("phys_state")))),
        rate: read(&pd.join("rate")).and_then(|r| Rate::parse(&r)),
        link_layer,
        gids,
    }
}

/// The IPv4 addresses of the devices' active ports, as `ADDR (DEV)`, for a
/// hint; IPv6 link-local ones left out (they need a scope).
fn reachable(devs: &[DeviceInfo]) -> Vec<String> {
    let mut v = Vec::new();
    for d in devs {
        for g in d.ports.iter().filter(|p| p.is_active()).flat_map(|p| &p.gids) {
            if let Some(ip @ IpAddr::V4(_)) = g.ip {
                let s = format!("{ip} ({})", d.name);
                if !v.contains(&s) {
                    v.push(s);
                }
            }
        }
    }
    v
}

/// What to do when the host has no usable RDMA device: `listed` is what
/// libibverbs listed (a device in sysfs that it does not list lacks its
/// provider library).
pub(crate) fn no_device_hint(listed: usize) -> String {
    no_device_hint_in(&devices().unwrap_or_default(), listed)
}

fn no_device_hint_in(devs: &[DeviceInfo], listed: usize) -> String {
    if devs.is_empty() {
        "this host has no RDMA device: load the NIC's driver, or for Soft-RoCE on an Ethernet \
         interface run `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE` (iproute2)"
            .to_string()
    } else if listed == 0 {
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        format!(
            "the kernel has RDMA devices ({}) but libibverbs lists none: its provider library is \
             missing (install rdma-core's providers, e.g. Debian's ibverbs-providers)",
            names.join(", ")
        )
    } else {
        "no such RDMA device here (`rdma link show` lists them)".to_string()
    }
}

/// What to do when no RDMA device has the address `addr`.
pub(crate) fn no_device_for(addr: &str) -> (bool, String) {
    no_device_for_in(&devices().unwrap_or_default(), addr)
}

fn no_device_for_in(devs: &[DeviceInfo], addr: &str) -> (bool, String) {
    let ips = reachable(devs);
    let loopback = addr.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) || addr == "localhost";
    let use_one = if devs.is_empty() {
        no_device_hint_in(devs, 0)
    } else if ips.is_empty() {
        "no RDMA device here has an IPv4 address on an active port: bring a port up or give its \
         interface an address (`rdma link show`, `ip addr`)"
            .to_string()
    } else {
        format!("use an address an RDMA device has: {}", ips.join(", "))
    };
    let text = if loopback {
        format!("{addr} is a loopback address, and no RDMA device is on the loopback interface; {use_one}")
    } else {
        format!("no RDMA device has the address {addr}; {use_one}")
    };
    (loopback, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A made-up sysfs: rxe0 on eth0 (active, a RoCE v1 link-local GID and a
    /// RoCE v2 IPv4 one), mlx5_0 down.
    fn fake() -> std::path::PathBuf {
        let root =
            std::env::temp_dir().join(format!("rpma-sysfs-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = fs::remove_dir_all(&root);
        let put = |p: &str, v: &str| {
            let f = root.join(p);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, format!("{v}\n")).unwrap();
        };
        put("rxe0/node_type", "1: CA");
        put("rxe0/node_guid", "5054:00ff:fe12:3401");
        put("rxe0/ports/1/state", "4: ACTIVE");
        put("rxe0/ports/1/phys_state", "5: LinkUp");
        put("rxe0/ports/1/link_layer", "Ethernet");
        put("rxe0/ports/1/rate", "100 Gb/sec (4X EDR)");
        put("rxe0/ports/1/gids/0", "fe80:0000:0000:0000:5054:00ff:fe12:3401");
        put("rxe0/ports/1/gid_attrs/types/0", "IB/RoCE v1");
        put("rxe0/ports/1/gid_attrs/ndevs/0", "eth0");
        put("rxe0/ports/1/gids/1", "0000:0000:0000:0000:0000:ffff:c633:6401");
        put("rxe0/ports/1/gid_attrs/types/1", "RoCE v2");
        put("rxe0/ports/1/gid_attrs/ndevs/1", "eth0");
        put("rxe0/ports/1/gids/2", "0000:0000:0000:0000:0000:0000:0000:0000");
        put("mlx5_0/node_type", "1: CA");
        put("mlx5_0/ports/1/state", "1: DOWN");
        put("mlx5_0/ports/1/link_layer", "InfiniBand");
        put("mlx5_0/ports/1/gids/0", "fe80:0000:0000:0000:0002:c903:0001:0002");
        root
    }

    #[test]
    fn lists_devices_ports_and_gids() {
        let root = fake();
        let devs = devices_in(&root).unwrap();
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["mlx5_0", "rxe0"]);
        let rxe = &devs[1];
        assert_eq!(rxe.node_type, "CA");
        let p = &rxe.ports[0];
        assert!(p.is_active());
        assert_eq!((p.port, p.phys_state, &p.link_layer), (1, PhysState::LinkUp, &LinkLayer::Ethernet));
        assert_eq!(p.rate.as_ref().map(|r| r.mbit_per_s), Some(100_000));
        assert_eq!((p.state.to_string(), p.phys_state.to_string()), ("ACTIVE".into(), "LinkUp".into()));
        assert_eq!(p.gids.len(), 2, "the zero GID is left out");
        assert_eq!(p.gids[1].kind.as_deref(), Some("RoCE v2"));
        assert_eq!(p.gids[1].netdev.as_deref(), Some("eth0"));
        assert_eq!(p.gids[1].ip, Some("198.51.100.1".parse().unwrap()));
        assert_eq!(p.gids[0].ip, Some("fe80::5054:ff:fe12:3401".parse().unwrap()));
        let ib = &devs[0].ports[0];
        assert!(!ib.is_active());
        assert_eq!(
            (ib.state, ib.phys_state, &ib.link_layer),
            (PortState::Down, PhysState::Other(0), &LinkLayer::InfiniBand)
        );
        assert_eq!(ib.rate, None);
        assert_eq!(ib.gids[0].ip, None, "an InfiniBand GID is not an IP address");
        assert!(devices_in(&root.join("nothing")).unwrap().is_empty(), "no sysfs list: no device");
        // A list that cannot be read is an error, not "no device".
        let e = devices_in(&root.join("rxe0/node_type")).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOTDIR), "{e}");
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn rates_parse_from_the_kernels_text() {
        let r = |t: &str| Rate::parse(t).map(|r| r.mbit_per_s);
        assert_eq!(r("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(r("100 Gb/sec (4X EDR)"), Some(100_000));
        assert_eq!(r("10 Gb/sec (1X QDR)"), Some(10_000));
        assert_eq!(r("fast"), None);
        assert_eq!(PortState::from_code(4), PortState::Active);
        assert_eq!(PortState::from_code(9), PortState::Other(9));
        assert_eq!(PortState::Other(9).to_string(), "state 9");
        assert_eq!(AtomicCap::from_code(1), AtomicCap::Hca);
        assert_eq!(AtomicCap::from_code(2).to_string(), "ATOMIC_GLOB");
        assert_eq!(AtomicCap::from_code(0).to_string(), "ATOMIC_NONE");
        assert_eq!(AtomicCap::from_code(7).to_string(), "atomic_cap 7");
    }

    #[test]
    fn hints_say_what_to_do() {
        let root = fake();
        let devs = devices_in(&root).unwrap();
        let (lo, t) = no_device_for_in(&devs, "127.0.0.1");
        assert!(lo && t.contains("loopback") && t.contains("198.51.100.1 (rxe0)"), "{t}");
        let (lo, t) = no_device_for_in(&devs, "192.0.2.77");
        assert!(!lo && t.contains("no RDMA device has the address 192.0.2.77") && t.contains("198.51.100.1"), "{t}");
        assert!(no_device_for_in(&devs, "::1").0);
        let t = no_device_hint_in(&devs, 0);
        assert!(t.contains("provider library") && t.contains("ibverbs-providers"), "{t}");
        let t = no_device_hint_in(&[], 0);
        assert!(t.contains("rdma link add rxe0 type rxe"), "{t}");
        let (_, t) = no_device_for_in(&[], "10.0.0.1");
        assert!(t.contains("this host has no RDMA device"), "{t}");
        // mlx5_0 alone: a device, but no active port with an address.
        let (_, t) = no_device_for_in(&devs[..1], "10.0.0.1");
        assert!(t.contains("no RDMA device here has an IPv4 address on an active port"), "{t}");
        fs::remove_dir_all(root).unwrap();
    }
}
