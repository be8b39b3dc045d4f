//! The harness's own promise about its VMs: a guest whose kernel stalls
//! mid-job (an RCU stall report on its console, then nothing from the job)
//! is killed after `RPMA_HARNESS_STALL_GRACE` seconds, not at the VM's
//! timeout, and its job runs again from the start on a fresh boot, which
//! `RPMA_HARNESS_ATTEMPT` tells it. The stall is the guest's own report,
//! written to the kernel log by the job in its first boot (a real one under
//! TCG is rare: seen once in a CI run, a 6.12 guest that never recovered).

use rpma_harness::RDMA_RUN;
use std::process::Command;
use std::time::{Duration, Instant};

/// The job: in its first boot it writes a stall report to the kernel log
/// (printed on the console, as the kernel's own are) and then hangs
/// silently; in the next it says which boot it runs in and exits 0.
const JOB: &str = r#"
if [ "$RPMA_HARNESS_ATTEMPT" = 1 ]; then
    echo "<3>rcu: INFO: rcu_preempt detected stalls on CPUs/tasks: (written by tests/harness_vm.rs)" > /dev/kmsg
    echo "boot 1: stalling"
    exec sleep 3600
fi
echo "boot $RPMA_HARNESS_ATTEMPT: done"
"#;

#[test]
fn a_stalled_guest_is_killed_and_its_job_run_again() {
    let start = Instant::now();
    let out = Command::new(RDMA_RUN)
        .args(["--vm", "--", "bash", "-c", JOB])
        .env("RPMA_HARNESS_STALL_GRACE", "20")
        .env("RPMA_HARNESS_BOOT_ATTEMPTS", "2")
        .env("RPMA_HARNESS_TIMEOUT", "900")
        .env_remove("RPMA_HARNESS_NVDIMM")
        .output()
        .unwrap_or_else(|e| panic!("cannot start {RDMA_RUN}: {e}"));
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("rdma-run took {took:.0?}; its stdout:\n{stdout}");
    let said = |what: &str| stderr.contains(what);
    assert!(out.status.success(), "rdma-run failed: {:?}\n{stderr}", out.status);
    assert!(stdout.contains("boot 1: stalling") && stdout.contains("boot 2: done"), "{stdout}");
    assert!(said("the guest kernel reports an RCU stall"), "{stderr}");
    assert!(said("the guest kernel stalled mid-job"), "{stderr}");
    assert!(said("running the job again from the start"), "{stderr}");
    // killed after the grace, long before the 900 s timeout
    assert!(took < Duration::from_secs(450), "took {took:?}");
}
