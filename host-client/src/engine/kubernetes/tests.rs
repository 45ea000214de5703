//! Unit tests of the kubernetes engine's reading of Pod status.

use super::*;
use serde_json::json;

#[test]
fn a_pod_that_will_not_start_says_why_in_one_line() {
    let pulling = json!({"status": {"phase": "Pending", "containerStatuses": [{
        "name": "sandbox",
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image\n\"r/x:1\""}}
    }]}});
    assert_eq!(
        not_starting(&pulling).as_deref(),
        Some("container sandbox: ImagePullBackOff: Back-off pulling image \"r/x:1\"")
    );
    let unschedulable = json!({"status": {"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient memory."
    }]}});
    assert_eq!(
        not_starting(&unschedulable).as_deref(),
        Some("Unschedulable: 0/3 nodes are available: 3 Insufficient memory.")
    );
    let exited = json!({"status": {"phase": "Failed", "containerStatuses": [{
        "name": "sandbox", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}
    }]}});
    assert_eq!(
        not_starting(&exited).as_deref(),
        Some("container sandbox exited 1 (Error)")
    );
    // Still on its way: no reason to give up.
    for pending in [
        json!({"status": {"phase": "Pending"}}),
        json!({"status": {"phase": "Pending", "containerStatuses": [{
            "name": "sandbox", "state": {"waiting": {"reason": "ContainerCreating"}}
        }]}}),
        json!({"status": {"phase": "Running", "containerStatuses": [{
            "name": "sandbox", "state": {"running": {}}
        }]}}),
    ] {
        assert_eq!(not_starting(&pending), None, "{pending}");
    }
    let long = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "x".repeat(1000)
    }]}});
    assert_eq!(not_starting(&long).unwrap().chars().count(), 300);
}
