//! `rpma devices`: the host's RDMA devices and what rpma does on each.

use crate::Res;
use serde::Serialize;

#[derive(Serialize)]
struct Device {
    name: String,
    node_type: String,
    node_guid: String,
    ports: Vec<Port>,
    /// What rpma probed on the device (None: it could not be opened).
    rpma: Option<Caps>,
}

#[derive(Serialize)]
struct Port {
    port: u32,
    state: String,
    phys_state: String,
    link_layer: String,
    rate: Option<String>,
    rate_mbit_per_s: Option<u64>,
    gids: Vec<Gid>,
}

#[derive(Serialize)]
struct Gid {
    index: u32,
    gid: String,
    kind: Option<String>,
    netdev: Option<String>,
    ip: Option<String>,
}

#[derive(Serialize)]
struct Caps {
    native_flush: bool,
    native_atomic_write: bool,
    odp: bool,
    mw_type1: bool,
    mw_type2: bool,
    iwarp: bool,
    max_mr_size: u64,
    max_qp_wr: u32,
    max_cqe: u32,
    max_sge: u32,
}

fn probe(name: &str) -> Option<Caps> {
    let ctx = rpma::IbvContext::open(Some(name)).ok()?;
    let c = rpma::Peer::new(&ctx).ok()?.capabilities();
    Some(Caps {
        native_flush: c.native_flush,
        native_atomic_write: c.native_atomic_write,
        odp: c.odp,
        mw_type1: c.mw_type1,
        mw_type2: c.mw_type2,
        iwarp: c.iwarp,
        max_mr_size: c.max_mr_size,
        max_qp_wr: c.max_qp_wr,
        max_cqe: c.max_cqe,
        max_sge: c.max_sge,
    })
}

fn list() -> Res<Vec<Device>> {
    Ok(rpma::device::devices()?
        .into_iter()
        .map(|d| Device {
            rpma: probe(&d.name),
            ports: d
                .ports
                .into_iter()
                .map(|p| Port {
                    port: p.port,
                    gids: p
                        .gids
                        .into_iter()
                        .map(|g| Gid {
                            index: g.index,
                            gid: g.gid.to_string(),
                            kind: g.kind,
                            netdev: g.netdev,
                            ip: g.ip.map(|ip| ip.to_string()),
                        })
                        .collect(),
                    state: p.state.to_string(),
                    phys_state: p.phys_state.to_string(),
                    link_layer: p.link_layer.to_string(),
                    rate_mbit_per_s: p.rate.as_ref().map(|r| r.mbit_per_s),
                    rate: p.rate.map(|r| r.text),
                })
                .collect(),
            name: d.name,
            node_type: d.node_type,
            node_guid: d.node_guid,
        })
        .collect())
}

/// Prints every RDMA device, as a table or as JSON.
pub fn run(json: bool) -> Res<()> {
    let devs = list()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&devs)?);
        return Ok(());
    }
    if devs.is_empty() {
        // The library's own hint: what to load or install.
        return Err(rpma::IbvContext::open(None).err().map_or("no RDMA device".into(), |e| e.to_string()).into());
    }
    for d in &devs {
        println!("{} ({}, node GUID {})", d.name, d.node_type, d.node_guid);
        match &d.rpma {
            Some(c) => println!(
                "  rpma: flush {}, atomic write {}, ODP {}, memory windows{}{}, iWARP {}; max MR {} B, QP depth {}, CQ {}, SGEs {}",
                if c.native_flush { "native" } else { "emulated (read after write)" },
                if c.native_atomic_write { "native" } else { "emulated (8-byte inline write)" },
                yes(c.odp),
                if c.mw_type1 { " type 1" } else { "" },
                if c.mw_type2 { " type 2" } else if !c.mw_type1 { " none" } else { "" },
                yes(c.iwarp),
                c.max_mr_size,
                c.max_qp_wr,
                c.max_cqe,
                c.max_sge
            ),
            None => println!("  rpma: the device could not be opened"),
        }
        for p in &d.ports {
            let rate = p.rate.as_deref().unwrap_or("rate unknown");
            println!("  port {}: {} ({}), {}, {rate}", p.port, p.state, p.phys_state, p.link_layer);
            for g in &p.gids {
                let ip = g.ip.as_deref().map(|ip| format!(" -> {ip}")).unwrap_or_default();
                let kind = g.kind.as_deref().unwrap_or("");
                let dev = g.netdev.as_deref().map(|n| format!(" on {n}")).unwrap_or_default();
                println!("    GID {:>3} {:<40} {kind}{dev}{ip}", g.index, g.gid);
            }
        }
    }
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
